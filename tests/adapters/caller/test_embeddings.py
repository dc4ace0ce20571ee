"""The offline all-MiniLM-L6-v2 embedder, directly and through the caller's default ``local``
provider over HTTP (spec "Method catalog": ``embed``)."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.llm.embeddings import MiniLMEmbedder

from .conftest import run_caller

PARAPHRASE = ["How do I reset my password?", "What are the steps to change my password?",
              "The train to Lyon leaves at noon."]


def _cosine(a: list[float], b: list[float]) -> float:
    va, vb = np.asarray(a), np.asarray(b)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


@pytest.mark.slow
async def test_local_embed_ranks_paraphrase_above_unrelated() -> None:
    """POST /mcp/embed on the local provider: 384-d unit vectors, paraphrase ranks first."""
    async with run_caller({"providers": {"local": {"kind": "local"}}}) as caller:
        async with caller.session() as http:
            resp = await http.post("/mcp/embed", json={
                "requestId": "e-1", "callerTool": "t", "inputs": PARAPHRASE})
            body = await resp.json()
            short = await (await http.post("/mcp/embed", json={
                "requestId": "e-2", "callerTool": "t", "inputs": ["hello"],
                "dimensions": 64})).json()
            models = await (await http.get("/mcp/models")).json()
    assert resp.status == 200
    query, paraphrase, unrelated = body["vectors"]
    assert len(query) == 384 and abs(np.linalg.norm(query) - 1.0) < 1e-4
    assert _cosine(query, paraphrase) > 0.6 > 0.2 > _cosine(query, unrelated)
    assert body["providerInfo"] == {"name": "local", "model": "all-MiniLM-L6-v2", "routing": {
        "capability": "embed", "strategy": "capability-default"}}
    assert body["usage"]["inputTokens"] == sum(
        len(MiniLMEmbedder()._tokenizer.encode(t).ids) for t in PARAPHRASE)
    assert models["provider"] == "local"
    assert models["models"][-1] == {"id": "all-MiniLM-L6-v2", "ready": True,
                                    "defaults": ["embed"]}
    assert models["models"][0]["defaults"] == ["chat", "chatStream"]
    assert len(short["vectors"][0]) == 64
    assert abs(np.linalg.norm(short["vectors"][0]) - 1.0) < 1e-4


@pytest.mark.slow
def test_batching_does_not_change_vectors() -> None:
    """Padding in a batch leaves each sentence's vector unchanged (mask is honoured)."""
    embedder = MiniLMEmbedder()
    together, _ = embedder.encode(PARAPHRASE)
    alone = np.stack([embedder.encode([t])[0][0] for t in PARAPHRASE])
    assert np.allclose(together, alone, atol=1e-5)
