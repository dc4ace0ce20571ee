"""Every use of a third-party library's private internals, in one place.

Each entry names the upstream version it was written against, why no public API does the job,
and the upstream issue where there is one. ``tests/unit/test_compat.py`` checks each against
the installed library, so an upgrade that moves what an entry relies on fails a test instead of
silently changing behaviour. Each function returns False (changing nothing) when the internals
are not what it expects, so a changed upstream degrades to the library's own default.
"""

from __future__ import annotations

from typing import Any

__all__ = ["llama_batch", "llama_context", "llama_grammar_parses", "llama_model", "llama_sampler",
           "restrict_ice_host_addresses", "set_audio_jitter_prefetch"]


# ---- aioice 0.13 (under aiortc 1.16): which local addresses ICE gathers on ------------------
def restrict_ice_host_addresses(pc: Any, addresses: list[str]) -> bool:
    """Gather host candidates only on ``addresses`` (loopback allowed), for this peer
    connection alone. aioice gathers on every interface and skips loopback; it has no option
    (aiortc/aioice#2, "Finer local candidate address selection", open since 2018). Wraps
    ``aioice.Connection.get_component_candidates`` of each ICE transport. Call it after
    ``setRemoteDescription`` (when the transports exist) and before gathering."""
    transports = [t.sender.transport for t in pc.getTransceivers()]
    if pc.sctp is not None:
        transports.append(pc.sctp.transport)
    done = False
    for dtls in transports:
        connection = getattr(getattr(getattr(dtls, "transport", None), "iceGatherer", None),
                             "_connection", None)
        original = getattr(connection, "get_component_candidates", None)
        if original is None:
            continue
        if not getattr(connection, "_voice_restricted", False):
            connection.get_component_candidates = _only(original, list(addresses))
            connection._voice_restricted = True
        done = True
    return done


def _only(gather: Any, allowed: list[str]) -> Any:
    def only_configured(*, component: int, addresses: list[str], timeout: int = 5) -> Any:
        return gather(component=component, addresses=allowed, timeout=timeout)

    return only_configured


# ---- aiortc 1.16: the inbound audio jitter buffer's depth ------------------------------------
def set_audio_jitter_prefetch(pc: Any, frames: int) -> bool:
    """Hold ``frames`` 20 ms frames in each inbound audio jitter buffer instead of aiortc's
    fixed 4 (80 ms): every frame held is latency added to the end of the user's turn. aiortc
    builds ``JitterBuffer(capacity=16, prefetch=4)`` inside ``RTCRtpReceiver.__init__`` with no
    option; this replaces the receiver's name-mangled ``__jitter_buffer`` before any packet
    arrived. Returns False, changing nothing, if this aiortc differs."""
    from aiortc.jitterbuffer import JitterBuffer

    done = False
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        current = getattr(receiver, "_RTCRtpReceiver__jitter_buffer", None)
        if transceiver.kind != "audio" or not isinstance(current, JitterBuffer):
            continue
        if any(p is not None for p in current._packets):  # already receiving: leave it
            continue
        receiver._RTCRtpReceiver__jitter_buffer = JitterBuffer(capacity=current.capacity,
                                                               prefetch=frames)
        done = True
    return done


# ---- llama-cpp-python 0.3.36: our own context, batch and sampler chain ------------------------
# The embedded engine decodes several conversations in one llama.cpp context (one sequence
# each) and steps them together; ``llama_cpp.Llama`` owns a single-sequence context and has no
# API for that. The package's ``_internals`` wrappers own the native objects' lifetimes (they
# free them when collected), which the raw ``llama_cpp.llama_*`` functions would leave to us.
def llama_model(llama: Any) -> Any:
    """The ``_internals.LlamaModel`` a loaded ``llama_cpp.Llama`` holds (``Llama._model``)."""
    return llama._model


def llama_context(llama: Any, params: Any) -> Any:
    """A new ``_internals.LlamaContext`` on ``llama``'s model with ``params``
    (``llama_context_default_params()``, changed)."""
    from llama_cpp import _internals

    return _internals.LlamaContext(model=llama._model, params=params, verbose=False)


def llama_batch(n_tokens: int) -> Any:
    """A token batch (``_internals.LlamaBatch``) of ``n_tokens``, one sequence per token."""
    from llama_cpp import _internals

    return _internals.LlamaBatch(n_tokens=n_tokens, embd=0, n_seq_max=1, verbose=False)


def llama_sampler() -> Any:
    """An empty sampler chain (``_internals.LlamaSampler``) to add samplers to."""
    from llama_cpp import _internals

    return _internals.LlamaSampler()


# ---- llama-cpp-python 0.3.36: a grammar llama.cpp cannot parse ---------------------------------
# ``llama_sampler_init_grammar`` returns NULL for a grammar it cannot parse (it prints "parse:
# error parsing grammar"), and ``LlamaSampler.add_grammar`` adds that NULL to the chain: the
# process dies with SIGSEGV at the next token. The package's own JSON-Schema converter writes
# such grammars (a pattern's ``\d`` or ``\.`` becomes an escape GBNF does not know), and a
# user's schema may be anything, so a grammar is parsed here first.
def llama_grammar_parses(model: Any, grammar: str) -> bool:
    """Whether llama.cpp can parse GBNF ``grammar`` (root ``root``) for ``model``
    (``_internals.LlamaModel``: its ``vocab``)."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True
