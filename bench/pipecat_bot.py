"""Pipecat 1.14 voice bot with the same models as voice_server, for the latency comparison.

Runs in its own virtualenv (never the project's): ``pip install
"pipecat-ai[webrtc,silero,whisper,piper,openai]==1.14.*" aiohttp fastapi`` plus the cached llama-cpp
wheel for the shared LLM server. ``bench/voice_latency.py --pipecat-python VENV/bin/python``
starts it as a subprocess inside the benchmark's private network namespace.

Wiring, as recorded in ``notes/pipecat-baseline.md``: SmallWebRTC transport (16 kHz in, 24 kHz
out) -> WhisperSTTService (our tiny.en directory) -> user aggregator (Silero VAD, default turn
strategies incl. Smart Turn v3) -> OpenAILLMService (the shared llama-cpp server) ->
PiperTTSService (our joe voice, in process) -> transport output -> assistant aggregator.
Signaling: ``POST /api/offer`` ``{sdp, type, pc_id?}`` -> ``{sdp, type, pc_id}`` (Pipecat's own
request handler, as its dev runner). ICE gathers on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import aioice.ice
from aiohttp import web


def _loopback_only(use_ipv4: bool = True, use_ipv6: bool = False) -> list[str]:
    return ["127.0.0.1"]


aioice.ice.get_host_addresses = _loopback_only  # aioice never offers loopback by itself

from pipecat.audio.vad.silero import SileroVADAnalyzer  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.runner import PipelineRunner  # noqa: E402
from pipecat.pipeline.task import PipelineParams, PipelineTask  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.services.openai.llm import OpenAILLMService  # noqa: E402
from pipecat.services.piper.tts import PiperTTSService  # noqa: E402
from pipecat.services.whisper.stt import WhisperSTTService  # noqa: E402
from pipecat.transports.base_transport import TransportParams  # noqa: E402
from pipecat.transports.smallwebrtc.request_handler import (  # noqa: E402
    SmallWebRTCRequest,
    SmallWebRTCRequestHandler,
)
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport  # noqa: E402

SYSTEM = "You are a friendly voice assistant. Answer in one or two short, plain sentences."


class LocalOpenAILLMService(OpenAILLMService):
    """llama-cpp-python's server rejects the ``developer`` role Pipecat 1.14 sometimes sends
    (HTTP 422, then every later request fails): send it as ``system``."""

    def build_chat_completion_params(self, params_from_context):
        params = super().build_chat_completion_params(params_from_context)
        params["messages"] = [
            {**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer"
            else m for m in params.get("messages", [])]
        return params


async def run_bot(connection, args: argparse.Namespace) -> None:
    transport = SmallWebRTCTransport(
        webrtc_connection=connection,
        params=TransportParams(audio_in_enabled=True, audio_out_enabled=True))
    stt = WhisperSTTService(settings=WhisperSTTService.Settings(model=args.whisper_dir))
    llm = LocalOpenAILLMService(base_url=args.llm_url, api_key="none",
                                settings=OpenAILLMService.Settings(model=args.llm_model,
                                                                   system_instruction=SYSTEM))
    tts = PiperTTSService(settings=PiperTTSService.Settings(voice=args.piper_voice),
                          download_dir=Path(args.piper_dir))
    context = LLMContext()
    pair = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()))
    pipeline = Pipeline([transport.input(), stt, pair.user(), llm, tts, transport.output(),
                         pair.assistant()])
    task = PipelineTask(pipeline, params=PipelineParams(enable_metrics=True))

    @transport.event_handler("on_client_disconnected")
    async def _gone(_transport, _client):
        await task.cancel()

    await PipelineRunner(handle_sigint=False).run(task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm-url", required=True)
    parser.add_argument("--llm-model", default="smollm2")
    parser.add_argument("--whisper-dir", required=True)
    parser.add_argument("--piper-dir", required=True)
    parser.add_argument("--piper-voice", default="en_US-joe-medium")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    try:
        from loguru import logger

        logger.remove()
        logger.add(lambda m: print(m, end="", flush=True), level="WARNING")
    except ImportError:
        pass
    handler = SmallWebRTCRequestHandler()
    bots: set[asyncio.Task[None]] = set()

    async def offer(request: web.Request) -> web.Response:
        body = await request.json()
        req = SmallWebRTCRequest(sdp=body["sdp"], type=body["type"], pc_id=body.get("pc_id"))

        async def start(connection) -> None:
            task = asyncio.create_task(run_bot(connection, args), name="pipecat-bot")
            bots.add(task)
            task.add_done_callback(bots.discard)

        answer = await handler.handle_web_request(req, start)
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/api/offer", offer)
    web.run_app(app, host="127.0.0.1", port=args.port, print=lambda *_: print("ready",
                                                                              flush=True))


if __name__ == "__main__":
    main()
