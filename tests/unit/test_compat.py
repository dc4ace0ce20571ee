"""Each entry of ``voice_server/compat.py`` against the installed library: these fail when an
upgrade moves the internals an entry relies on (see that module for why each exists)."""

from __future__ import annotations

import asyncio
import inspect

from aiortc import RTCPeerConnection, RTCSessionDescription

from voice_server.compat import (
    llama_batch,
    llama_sampler,
    restrict_ice_host_addresses,
    set_audio_jitter_prefetch,
)
from voice_server.config import Settings


async def test_audio_receivers_get_the_configured_prefetch() -> None:
    pc = RTCPeerConnection()
    try:
        pc.addTransceiver("audio", direction="recvonly")
        buffers = lambda: [t.receiver._RTCRtpReceiver__jitter_buffer  # noqa: E731
                           for t in pc.getTransceivers()]
        assert [b._prefetch for b in buffers()] == [4]  # aiortc's own default
        assert set_audio_jitter_prefetch(pc, Settings().rtc_jitter_prefetch_frames)
        assert [(b._prefetch, b.capacity) for b in buffers()] == [(1, 16)]
    finally:
        await pc.close()


def test_a_one_frame_buffer_still_puts_reordered_packets_back_in_order() -> None:
    """Why one frame is enough for us (we feed the VAD, we do not play it out): aiortc's buffer
    releases a frame only when the frames before it are all there, so a packet that arrives
    after its successor is waited for, not dropped; the depth only adds delay (one frame out
    per packet in: a frame held back by a late packet comes out one packet later)."""
    from aiortc.jitterbuffer import JitterBuffer
    from aiortc.rtp import RtpPacket

    buffer = JitterBuffer(capacity=16, prefetch=1)
    out = []
    for seq in (100, 102, 101, 103, 105, 104, 106, 107):
        packet = RtpPacket(payload_type=111, sequence_number=seq, timestamp=seq * 960)
        packet._data = bytes([seq % 256])
        _, frame = buffer.add(packet)
        if frame is not None:
            out.append(frame.timestamp // 960)
    assert out == [100, 101, 102, 103, 104, 105]


async def test_video_receivers_are_left_alone() -> None:
    pc = RTCPeerConnection()
    try:
        pc.addTransceiver("video", direction="recvonly")
        assert not set_audio_jitter_prefetch(pc, 1)
    finally:
        await pc.close()


async def test_ice_gathers_only_on_the_given_addresses() -> None:
    """aioice skips loopback on its own; restricted to 127.0.0.1 it offers exactly that."""
    offerer, answerer = RTCPeerConnection(), RTCPeerConnection()
    try:
        offerer.addTransceiver("audio")
        offerer.createDataChannel("data")
        assert restrict_ice_host_addresses(offerer, ["127.0.0.1"])
        await offerer.setLocalDescription(await offerer.createOffer())
        hosts = {line.split()[4] for line in offerer.localDescription.sdp.splitlines()
                 if line.startswith("a=candidate:")}
        assert hosts == {"127.0.0.1"}
        await answerer.setRemoteDescription(RTCSessionDescription(
            sdp=offerer.localDescription.sdp, type="offer"))
        assert restrict_ice_host_addresses(answerer, ["127.0.0.1"])
        await answerer.setLocalDescription(await answerer.createAnswer())
        assert {line.split()[4] for line in answerer.localDescription.sdp.splitlines()
                if line.startswith("a=candidate:")} == {"127.0.0.1"}
    finally:
        await asyncio.gather(offerer.close(), answerer.close())


def test_llama_cpp_internals_have_the_shapes_the_engine_uses() -> None:
    from llama_cpp import Llama, _internals

    assert list(inspect.signature(_internals.LlamaContext).parameters) == [
        "model", "params", "verbose"]
    assert "_model" in inspect.getsource(Llama.__init__)  # Llama._model, the LlamaModel
    for method in ("n_ctx_train",):
        assert callable(getattr(_internals.LlamaModel, method))
    for method in ("close",):
        assert callable(getattr(_internals.LlamaContext, method))
    batch = llama_batch(8)
    assert batch.batch is not None and callable(batch.close)  # the native llama_batch
    batch.close()
    chain = llama_sampler()
    assert chain.sampler is not None  # the native chain, handed to llama_sampler_sample
    for method in ("add_grammar", "add_grammar_lazy_patterns", "add_greedy", "add_top_k",
                   "add_top_p", "add_min_p", "add_temp", "add_dist"):
        assert callable(getattr(chain, method)), method


def test_llama_cpp_still_adds_a_grammar_it_could_not_parse() -> None:
    """``LlamaSampler.add_grammar`` hands llama.cpp's result to the chain unchecked (a NULL for
    a grammar it cannot parse: SIGSEGV at the next token), so ``llama_grammar_parses`` is
    asked first. When upstream checks the result, this fails and the guard may go."""
    from llama_cpp import _internals

    source = inspect.getsource(_internals.LlamaSampler.add_grammar)
    assert "llama_sampler_init_grammar" in source and "llama_sampler_chain_add" in source
    assert "if not sampler" not in source and "is None" not in source and "raise" not in source
