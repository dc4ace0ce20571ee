"""The voice server: one asyncio process serving HTTP routes and WebSocket signaling on one port
(aiohttp: one server for plain requests and WebSocket upgrades).

``async with VoiceServer(settings) as server:`` loads the models, opens the session store and
starts listening; leaving the block closes every connection and task.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import ipaddress
import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .. import __version__
from ..compute import ComputePool
from ..config import ConfigError, Settings
from ..llm import ChatRequest, LLMError
from ..llm.registry import build_router
from ..llm.types import LoadsModel, ReachedRemotely
from ..metrics import Metrics, TurnRecord, session_tag
from ..pipeline.answer_guard import AnswerGuard
from ..pipeline.chunker import SentenceChunker
from ..pipeline.pacing import Pacing
from ..pipeline.stt import WhisperSTT
from ..pipeline.tts import PiperTTS
from ..pipeline.turn import HistoryWindow, Responder
from ..pipeline.turn_model import SmartTurn, TurnModelError
from ..protocol import VisionAttachment
from ..serving import Site
from .auth import TokenSigner, turn_credentials
from .connection import Connection
from .http import HttpRoutes
from .limits import Admission, MemoryBudget
from .responders import Responders
from .rtc import rtc_factory
from .sessions import InMemorySessionStore, Session, SessionStore
from .warm import PromptWarmer
from .websocket import ServerWebSocket

if TYPE_CHECKING:
    from .phone import PhoneCall

__all__ = ["VoiceServer", "run_forever"]

log = logging.getLogger(__name__)

WEB_CLIENT_DIR = Path(__file__).resolve().parents[2] / "web_client"
HEALTH_WAIT_S = 2.0  # the longest a dependency may take to report its health
KEEPALIVE_S = 20.0  # a ping after this long without a frame; no pong within half of it: closed
WRITE_LIMIT = 64 * 1024  # bytes buffered for a client before a send waits for it to read


class VoiceServer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.pool = ComputePool(settings.compute_workers)
        self.stt = WhisperSTT.from_settings(self.pool, settings,
                                            on_restart=self.metrics.worker_restarted)
        self.tts = PiperTTS(self.pool, voice=settings.tts_voice, threads=settings.tts_threads,
                            on_restart=self.metrics.worker_restarted)
        self.new_chunker = functools.partial(
            SentenceChunker, first_max_words=settings.tts_first_piece_words,
            second_max_words=settings.tts_second_piece_words,
            max_chars=settings.tts_max_piece_chars)
        self.new_pacing = functools.partial(Pacing, enabled=settings.tts_keep_speaking)
        self.history_window = HistoryWindow.from_settings(settings)
        self.new_guard = functools.partial(
            AnswerGuard, max_chars=settings.answer_max_chars, fallback=settings.empty_answer_text,
            apology=settings.llm_failure_text)
        self.router = build_router(settings, others=self.pool.shared,
                                   on_worker_restart=self._llm_worker_restarted)
        self.sessions: SessionStore = self._session_store()
        self.input_budget = MemoryBudget(settings.input_budget_bytes)
        self.admission = Admission(max_total=settings.max_sessions,
                                   max_per_ip=settings.max_sessions_per_ip)
        self.signer = TokenSigner(settings.auth_secret) if settings.auth_secret else None
        self.trusted_proxies = [ipaddress.ip_network(n, strict=False)
                                for n in settings.trusted_proxies]
        self.draining = False
        self.turn_model = self._end_of_turn_model()
        # the VAD's speech model runs in the end-of-turn model's worker (turn_model.py)
        self.speech_model = self.turn_model if self.turn_model is not None and \
            self.turn_model.speech_model else None
        # the embedded model shares this machine's cores with the end-of-turn judges
        self.llm_shares_cpu = isinstance(self.router.default_provider, LoadsModel)
        self.rtc_factory = rtc_factory(settings, self.stt, lambda: self.pool.busy,
                                       self.turn_model, speech_model=self.speech_model,
                                       llm_shares_cpu=self.llm_shares_cpu, metrics=self.metrics)
        self.live: dict[str, Connection | PhoneCall] = {}  # session id -> who holds it
        self.last_turns: collections.deque[TurnRecord] = collections.deque(maxlen=200)
        self.warmer = PromptWarmer(self.router, lambda: bool(self.live or self._sockets))
        self.responders = Responders(
            settings, self.router, self.history_window,
            warm=self.warmer.add if settings.warm_playbooks else None)
        self.sidecars: dict[str, dict[str, str]] = {}
        self.phone: Any = None  # PhoneEndpoint when phone calls are on
        self._stack = contextlib.AsyncExitStack()
        self._site: Site | None = None
        self._sockets: set[ServerWebSocket] = set()
        self._started = time.monotonic()
        self.routes = HttpRoutes(health=self.health, metrics=self.metrics.render,
                                 static_dir=WEB_CLIENT_DIR,
                                 allowed_origins=settings.allowed_origins,
                                 extra={"/playbooks": self.responders.list_handler},
                                 signer=self.signer, trusted_proxies=self.trusted_proxies)

    # ---- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> VoiceServer:
        try:
            return await self._start()
        except BaseException:
            await self.aclose()  # model workers already started stop too
            raise

    async def _start(self) -> VoiceServer:
        self.metrics.watch_loop(asyncio.get_running_loop())
        await self.sessions.__aenter__()
        await self.responders.__aenter__()
        if self.settings.preload_models:
            await self.load_models()
            self.responders.warm_all()  # the playbooks' prompts, computed ahead
        if self.settings.sidecars:
            from ..adapters.launch import launch_sidecars

            self.sidecars = await self._stack.enter_async_context(
                launch_sidecars(self.router, self.settings.sidecars, self.settings))
            log.info("sidecars: %s", self.sidecars)
        if self.settings.phone or self.settings.phone_port is not None:
            from .phone import PhoneEndpoint  # noqa: PLC0415 - only when configured

            self.phone = await self._stack.enter_async_context(PhoneEndpoint(self))
        self._site = await Site(self._app(), self.settings.host, self.settings.port).start()
        log.info("voice-server %s listening on ws://%s:%d/ws", __version__, self.settings.host,
                 self.port)
        if self.phone is not None:
            log.info("phone (Twilio Media Streams) on http://%s:%d/twilio/voice",
                     self.settings.host, self.port)
        return self

    def _app(self) -> web.Application:
        # no request bodies here but the phone webhook's small form
        app = web.Application(client_max_size=64 * 1024)
        app.on_response_prepare.append(_no_server_header)
        if self.phone is not None:
            self.phone.add_routes(app)
        app.router.add_route("*", "/{path:.*}", self._request)
        return app

    def _frame_limit(self) -> int:
        """A frame somewhat over ``max_message_bytes`` is read and answered INVALID_MESSAGE;
        a larger one closes the connection (1009) unread. Reading pauses while 64 KiB of
        frames wait to be handled, so a connection holds at most a few frames of this size
        (waiting, being read, being handled)."""
        limit = self.settings.max_message_bytes
        return limit + max(64 * 1024, limit // 8)

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _session_store(self) -> SessionStore:
        s = self.settings
        if s.session_store == "memory":
            return InMemorySessionStore(ttl_s=s.session_ttl_s,
                                        empty_ttl_s=s.empty_session_ttl_s)
        from .redis_store import RedisSessionStore  # noqa: PLC0415 - only when configured

        store = RedisSessionStore(s.session_store, ttl_s=s.session_ttl_s,
                                  empty_ttl_s=s.empty_session_ttl_s,
                                  lease_s=s.session_lease_s, claim_wait_s=s.session_claim_wait_s,
                                  heartbeat_s=s.session_heartbeat_s)
        store.on_release = self.evict
        return store

    async def drain(self, grace_s: float) -> None:
        """Graceful shutdown: stop accepting, let running turns finish for up to ``grace_s``,
        persist every session and close its socket with 1001 "going away"."""
        self.draining = True
        if self._site is not None:
            await self._site.stop_accepting()
        jobs = [job for conn in self.live.values() if (job := conn.running_job) is not None]
        if jobs:
            log.info("draining: waiting up to %.1f s for %d running turn(s)", grace_s, len(jobs))
            await asyncio.wait(jobs, timeout=grace_s)
        for conn in list(self.live.values()):
            await conn.shutdown(1001, "server shutting down; reconnect")

    async def evict(self, session_id: str) -> None:
        """Another instance claimed this session: cut the local connection, persist, let go."""
        conn = self.live.get(session_id)
        if conn is not None:
            await conn.shutdown(4000, "session resumed on another connection")

    async def aclose(self) -> None:
        if self._site is not None:
            await self._site.stop_accepting()
            await asyncio.gather(*(ws.close(1001, "server shutting down")
                                   for ws in list(self._sockets)))
            if self.phone is not None:
                await self.phone.hang_up_all()
            await self._site.aclose()  # the connections' handlers end: sessions persisted
            self._site = None
        for conn in list(self.live.values()):
            await conn.close()
        await self._stack.aclose()
        await self.sessions.aclose()
        await self.warmer.aclose()
        await self.responders.aclose()
        await self.router.aclose()
        await asyncio.gather(self.stt.aclose(), self.tts.aclose(),
                             *([self.turn_model.aclose()] if self.turn_model else []))
        self.pool.close()

    async def load_models(self) -> None:
        """Start the model workers; each loads its model and passes a one-step self-test
        before it is ready (the server listens only after that)."""
        started = time.monotonic()
        await asyncio.gather(self.stt.load(), self.tts.load(), self._warm_llm(),
                             self._load_turn_model())
        log.info("models loaded and warm in %.1f s", time.monotonic() - started)

    def _end_of_turn_model(self) -> SmartTurn | None:
        choice = self.settings.end_of_turn_model
        if choice == "off":
            return None
        try:
            return SmartTurn(self.pool, model=None if choice == "smart-turn" else choice,
                             speech=self.settings.vad_noisy_after_ms > 0,
                             on_restart=self.metrics.worker_restarted)
        except TurnModelError as exc:
            return self._without_turn_model(exc)

    async def _load_turn_model(self) -> None:
        if self.turn_model is not None:
            try:
                await self.turn_model.load()
            except TurnModelError as exc:
                self._without_turn_model(exc)

    def _without_turn_model(self, exc: TurnModelError) -> None:
        """A model the user named must work; the bundled one failing leaves words and silence."""
        if (choice := self.settings.end_of_turn_model) != "smart-turn":
            raise ConfigError(f"end_of_turn_model {choice!r}: {exc}") from exc
        log.warning("no end-of-turn model (%s): words and silence alone end turns", exc)

    async def _warm_llm(self) -> None:
        """Load an in-process model and run one token with the system prompt: the model's
        cache then holds that prompt, which every turn starts with (the first answer is ~150 ms
        sooner). A remote endpoint is asked for its models only: one that cannot be reached
        or lacks the model is said now, not by each turn failing."""
        provider = self.router.default_provider
        if isinstance(provider, ReachedRemotely):
            if problem := await provider.problem(self.settings.llm_model):
                log.warning("%s: %s; turns fail until it answers (--llm-base-url, "
                            "--llm-model)", self.settings.llm_base_url, problem)
        if isinstance(provider, LoadsModel):
            await provider.load()
            warm = ChatRequest(messages=[{"role": "system", "content": self.settings.system_prompt},
                                         {"role": "user", "content": "Hello."}], max_tokens=1)
            try:
                await self.router.complete(warm)
            except LLMError as exc:
                log.warning("LLM warm-up failed: %s", exc)

    @property
    def port(self) -> int:
        assert self._site is not None
        return self._site.port

    # ---- per-connection ---------------------------------------------------------------------
    async def _request(self, request: web.Request) -> web.StreamResponse:
        """Every request on the port: an HTTP route (answered, then the connection closes),
        or the llmrtc WebSocket once ``routes`` let its upgrade through."""
        answer = await self.routes(request)
        if answer is not None:
            answer.force_close()
            return answer
        # no compression: audio is base64 and JSON is small, deflate would cost latency
        ws = web.WebSocketResponse(max_msg_size=self._frame_limit(), compress=False,
                                   heartbeat=KEEPALIVE_S, writer_limit=WRITE_LIMIT)
        await ws.prepare(request)
        socket = ServerWebSocket(ws, request)
        self._sockets.add(socket)
        self.metrics.connections.inc()
        try:
            await Connection(socket, self).run()
        finally:
            self._sockets.discard(socket)
            await socket.close()
        return ws

    def attach(self, session_id: str, conn: Connection | PhoneCall) -> None:
        self.live[session_id] = conn
        self.metrics.sessions.set(len(self.live))

    def detach(self, session_id: str, conn: Connection | PhoneCall) -> None:
        if self.live.get(session_id) is conn:
            del self.live[session_id]
        self.metrics.sessions.set(len(self.live))

    async def take_over(self, session_id: str, conn: Connection) -> None:
        """A reconnect claimed this session: the previous connection (if any) lets go."""
        previous = self.live.get(session_id)
        self.attach(session_id, conn)
        if previous is not None and previous is not conn and previous.conversation is not None:
            await previous.conversation.interrupt()
            previous.conversation.session = None
            await previous.cut(4000, "session resumed on another connection")

    def record_turn(self, record: TurnRecord) -> None:
        """Count a finished turn; keep it among ``last_turns`` when it got as far as a
        transcript and was not taken back (benchmarks and tests read those)."""
        self.metrics.record_turn(record)
        if record.stt_done is not None and not record.taken_back:
            self.last_turns.append(record)

    def ice_servers_for(self, session_id: str) -> list[dict[str, Any]]:
        servers = list(self.settings.ice_servers)
        s = self.settings
        if s.turn_secret and s.turn_urls:
            servers.append(turn_credentials(s.turn_secret, s.turn_urls, session_tag(session_id),
                                            s.turn_ttl_s))
        return servers

    def playbook_known(self, playbook_id: str) -> bool:
        return self.responders.known(playbook_id)

    def responder_for(self, session: Session) -> Responder:
        return self.responders.for_session(session)

    def greeting_for(self, session: Session) -> str | None:
        return self.responders.greeting_for(session)

    def _llm_worker_restarted(self, stage: str) -> None:
        """The embedded model's worker died: the prompts it computed ahead died with it, so
        the current playbooks' are computed again once it is back (and no call is live)."""
        self.metrics.worker_restarted(stage)
        self.responders.model_restarted()

    def user_message(self, text: str, attachments: list[VisionAttachment]) -> dict[str, Any]:
        if not attachments:
            return {"role": "user", "content": text}
        if not self.router.supports_vision(self.settings.llm_model):
            log.warning("dropping %d image attachment(s): the LLM does not accept images",
                        len(attachments))
            return {"role": "user", "content": text}
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
        for att in attachments:
            url = att.data if att.data.startswith(("data:", "http://", "https://")) else \
                f"data:{att.mime_type or 'image/jpeg'};base64,{att.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": "user", "content": parts}

    async def health(self) -> dict[str, Any]:
        """Answers within ``HEALTH_WAIT_S`` however slow a dependency is (a hung LLM endpoint or
        session store shows as ``unknown``): a load balancer must always get an answer."""
        llm = await self.router.health(HEALTH_WAIT_S)
        models = {"stt": self.stt.health(), "tts": self.tts.health(), "llm": llm}
        if self.turn_model is not None:
            models["end_of_turn"] = self.turn_model.health()
        # a model worker that died and is starting again serves no turn meanwhile
        down = ("failed", "starting", "restarting")
        failed = any(v.get("status") in (*down, "unknown")
                     for v in (models["stt"], models["tts"], *llm.values()))
        store = self.sessions.health()
        try:
            async with asyncio.timeout(HEALTH_WAIT_S):
                store["count"] = await self.sessions.count()
        except TimeoutError:
            store["status"] = "degraded"
        degraded = failed or store.get("status") == "degraded"
        return {
            "status": "draining" if self.draining else "degraded" if degraded else "ok",
            "version": __version__,
            "uptime_s": round(time.monotonic() - self._started, 1),
            "models": models,
            "stores": {"sessions": store},
            "webrtc": True,
            "sidecars": self.sidecars,
            "phone": {"port": self.phone.port or self.port,
                      "signed": bool(self.settings.twilio_auth_token)}
            if self.phone is not None else None,
            "connections": len(self.live),
            # stage prompts computed ahead (server/warm.py); a stage not yet computed makes
            # its first caller wait for its prompt
            "prompts_ahead": self.warmer.progress() if self.settings.warm_playbooks else None,
        }


async def _no_server_header(request: web.Request, response: web.StreamResponse) -> None:
    """No software name and version in the answers (aiohttp adds its own unless one is set)."""
    response.headers["Server"] = "voice-server"


async def run_forever(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with VoiceServer(settings) as server:
        print(f"voice-server ready: ws://{settings.host}:{server.port}/ws  "
              f"(page: http://{settings.host}:{server.port}/)", flush=True)
        await stop.wait()
        log.info("stopping: graceful shutdown (up to %.1f s)", settings.shutdown_grace_s)
        started = time.monotonic()
        await server.drain(settings.shutdown_grace_s)
    log.info("stopped in %.1f s", time.monotonic() - started)
