"""Phone calls through Twilio Media Streams (bidirectional): the same conversation core,
turn-taking and playbooks as the web page, over a telephone line.

``PhoneEndpoint`` serves, on the server's port when ``phone`` is on, and also on a port of
their own when ``phone_port`` is set:

* ``POST|GET /twilio/voice``: the voice webhook. Answers TwiML ``<Connect><Stream
  url="wss://HOST/twilio/media">`` with the playbook as a ``<Parameter>`` (``?playbook=`` on the
  webhook URL, else ``phone_playbook``, else ``default_playbook``). With ``twilio_auth_token``
  set, a request without a valid ``X-Twilio-Signature`` is refused (403).
* ``WS /twilio/media``: one ``PhoneCall`` per stream: ``start`` opens a session (and the
  agent says the playbook's ``greeting``, if it has one); inbound mu-law is decoded, resampled
  to 16 kHz and fed to a ``Listener`` (VAD, end of turn, barge-in); the agent's speech goes
  out on a ``PhoneLine`` (paced ``media``, ``mark`` per sentence, ``clear`` at barge-in);
  keypad digits (``dtmf``) become a user turn ``"(keypad) 12#"``; ``stop`` (hang-up) ends
  the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit, urlunsplit

from aiohttp import WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from ..metrics import session_tag
from ..pipeline.arrival import ArrivalClock
from ..pipeline.audio import STT_RATE, MulawCodec, Resampler
from ..protocol import Error, Message, twilio
from ..serving import Site
from .conversation import Conversation, ConversationServices
from .listening import Listener, TurnModel
from .phone_line import PhoneLine
from .playout import PlayoutSpeechOutput

if TYPE_CHECKING:
    from ..compute import ComputePool
    from ..config import Settings
    from ..metrics import Metrics
    from .limits import Admission
    from .sessions import Session

__all__ = ["PhoneCall", "PhoneEndpoint", "PhoneHost"]

log = logging.getLogger(__name__)

VOICE_PATH = "/twilio/voice"
MEDIA_PATH = "/twilio/media"
START_TIMEOUT_S = 10.0  # Twilio sends connected and start at once
KEYPAD_WAIT_S = 1.5  # digits pressed this close together are one entry ("#" ends it sooner)


def _public_url(request: web.Request, base: str | None, path: str, *, ws: bool) -> str:
    """The URL Twilio used (or will use) for ``path``: from ``phone_public_url`` when set,
    else from the request's Host and (behind a proxy) ``X-Forwarded-Proto``."""
    if base:
        parts = urlsplit(base.rstrip("/"))
        scheme, netloc, prefix = parts.scheme, parts.netloc, parts.path
    else:
        scheme = request.headers.get("X-Forwarded-Proto", request.scheme).split(",")[0].strip()
        netloc, prefix = request.host, ""
    secure = scheme in ("https", "wss")
    scheme = ("wss" if secure else "ws") if ws else ("https" if secure else "http")
    return urlunsplit((scheme, netloc, prefix + path, "", ""))


class PhoneHost(ConversationServices, Protocol):
    """What a phone call needs from the server that answered it (besides what its
    conversation needs); the server wires it, this module does not import the server."""

    settings: Settings
    admission: Admission
    pool: ComputePool
    metrics: Metrics
    turn_model: TurnModel | None
    llm_shares_cpu: bool  # the embedded LLM: end-of-turn judges go before it (listening.py)

    def attach(self, session_id: str, conn: PhoneCall) -> None: ...

    def detach(self, session_id: str, conn: PhoneCall) -> None: ...

    def playbook_known(self, playbook_id: str) -> bool: ...

    def greeting_for(self, session: Session) -> str | None: ...


class PhoneEndpoint:
    """``add_routes(app)`` puts the Twilio routes on the server's own application;
    ``async with PhoneEndpoint(server) as phone:`` also serves them on ``settings.phone_port``
    when that is set (``phone.port`` is then the bound port, else None). Leaving the block
    hangs up every call."""

    def __init__(self, server: PhoneHost) -> None:
        self.server = server
        self.settings = server.settings
        self._site: Site | None = None
        self.calls: set[PhoneCall] = set()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("POST", VOICE_PATH, self.voice)
        app.router.add_route("GET", VOICE_PATH, self.voice)
        app.router.add_get(MEDIA_PATH, self.media)

    async def __aenter__(self) -> PhoneEndpoint:
        if self.settings.phone_port is not None:
            app = web.Application(client_max_size=64 * 1024)  # a webhook's form is small
            self.add_routes(app)
            self._site = await Site(app, self.settings.host, self.settings.phone_port).start()
            log.info("phone (Twilio Media Streams) also on http://%s:%d%s", self.settings.host,
                     self.port, VOICE_PATH)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.hang_up_all()
        if self._site is not None:
            await self._site.aclose()
            self._site = None

    async def hang_up_all(self) -> None:
        for call in list(self.calls):
            await call.hang_up()

    @property
    def port(self) -> int | None:
        """The bound ``phone_port``; None when the endpoints are on the server's port only."""
        return self._site.port if self._site is not None else None

    def _signed(self, request: web.Request, url: str, params: dict[str, str]) -> bool:
        token = self.settings.twilio_auth_token
        if not token:
            return True
        from twilio.request_validator import RequestValidator  # noqa: PLC0415

        signature = request.headers.get("X-Twilio-Signature", "")
        if signature and RequestValidator(token).validate(url, params, signature):
            return True
        log.warning("refused a %s request to %s without a valid X-Twilio-Signature (check "
                    "twilio_auth_token and phone_public_url)", request.method, request.path)
        return False

    async def voice(self, request: web.Request) -> web.Response:
        """The voice webhook: TwiML that connects the call to our media stream."""
        try:
            params = dict(await request.post()) if request.method == "POST" else {}
        except (ValueError, LookupError, HttpProcessingError) as exc:  # a broken multipart
            # body, a multipart type without its boundary, an unknown charset: not Twilio's
            return web.Response(status=400, text=f"malformed form body: {exc}\n")
        url = _public_url(request, self.settings.phone_public_url, VOICE_PATH, ws=False)
        query = request.rel_url.query_string
        if not self._signed(request, url + (f"?{query}" if query else ""),
                            {k: str(v) for k, v in params.items()}):
            return web.Response(status=403, text="invalid Twilio signature\n")
        playbook = request.query.get("playbook") or self.settings.phone_playbook or \
            self.settings.default_playbook
        stream = _public_url(request, self.settings.phone_public_url, MEDIA_PATH, ws=True)
        twiml = twilio.twiml_connect(stream, {"playbook": playbook} if playbook else {})
        return web.Response(text=twiml, content_type="text/xml",
                            headers={"Cache-Control": "no-store"})

    async def media(self, request: web.Request) -> web.StreamResponse:
        url = _public_url(request, self.settings.phone_public_url, MEDIA_PATH, ws=True)
        if not self._signed(request, url, {}):
            return web.Response(status=403, text="invalid Twilio signature\n")
        ws = web.WebSocketResponse(max_msg_size=twilio.MAX_EVENT_BYTES, heartbeat=20)
        await ws.prepare(request)
        call = PhoneCall(ws, self.server)
        self.calls.add(call)
        try:
            await call.run()
        finally:
            self.calls.discard(call)
        return ws


class PhoneCall:
    """One Twilio media stream: a session, its conversation, turn-taking and the line."""

    def __init__(self, ws: web.WebSocketResponse, server: PhoneHost) -> None:
        self.ws = ws
        self.server = server
        self.settings = server.settings
        self.conversation: Conversation | None = None
        self.line: PhoneLine | None = None
        self._send_lock = asyncio.Lock()
        self._admitted: str | None = None
        self._closed = False
        self._digits = ""
        self._keypad: asyncio.Task[None] | None = None

    @property
    def running_job(self) -> asyncio.Task[None] | None:
        return self.conversation.running_job if self.conversation is not None else None

    async def run(self) -> None:
        try:
            start = await self._wait_start()
        except (TimeoutError, twilio.TwilioEventError) as exc:
            log.warning("phone stream closed before it started: %s", str(exc) or "no start event")
            await self.ws.close(code=1008, message=b"expected a start event")
            return
        if (start.encoding, start.sample_rate, start.channels) != ("audio/x-mulaw", 8000, 1):
            log.warning("phone stream refused: %s at %d Hz, %d channel(s) (expected "
                        "audio/x-mulaw, 8000 Hz, mono)", start.encoding, start.sample_rate,
                        start.channels)
            await self.ws.close(code=1003, message=b"unsupported media format")
            return
        # Every call comes from Twilio's few addresses: count calls against the instance's
        # session limit, not the per-address one.
        key = f"twilio:{start.stream_sid}"
        if (refusal := self.server.admission.admit(key)) is not None:
            log.warning("phone call refused: %s", refusal)
            await self.ws.close(code=1013, message=b"try again later")
            return
        self._admitted = key
        try:
            await self._serve(start)
        finally:
            await self.close()

    async def _wait_start(self) -> twilio.Start:
        async with asyncio.timeout(START_TIMEOUT_S):
            async for msg in self.ws:
                if msg.type != WSMsgType.TEXT:
                    raise twilio.TwilioEventError("events are JSON text frames")
                event = twilio.parse_event(msg.data)
                if isinstance(event, twilio.Start):
                    return event
                if isinstance(event, twilio.Stop):
                    break
        raise twilio.TwilioEventError("the stream ended before its start event")

    async def _serve(self, start: twilio.Start) -> None:
        server = self.server
        session = await server.sessions.create()
        session.meta["channel"] = "phone"
        playbook = start.custom_parameters.get("playbook") or self.settings.phone_playbook \
            or self.settings.default_playbook
        if playbook:
            if server.playbook_known(playbook):
                session.meta["playbook"] = playbook
            else:
                log.warning("phone call asked for unknown playbook %r: plain chat", playbook)
        self.conversation = conversation = Conversation(
            server, session, self._emit, max_attachment_bytes=self.settings.max_attachment_bytes)
        server.attach(session.id, self)
        log.info("phone call %s started (session %s)", session_tag(start.call_sid),
                 session_tag(session.id))
        async with PhoneLine(self._send_text, start.stream_sid) as line:
            self.line = line
            listener = Listener(
                settings=self.settings, conversation=lambda: conversation, send=self._emit,
                stt=server.stt, turn_model=server.turn_model,
                speech_model=server.speech_model, playback=line,
                speech_output=lambda: PlayoutSpeechOutput(line, self._emit),
                busy=lambda: server.pool.busy, llm_shares_cpu=server.llm_shares_cpu,
                metrics=server.metrics)
            if greeting := server.greeting_for(session):
                await conversation.greet(greeting, PlayoutSpeechOutput(line, self._emit))
            try:
                await self._listen(listener, line)
            finally:
                if self._keypad is not None:
                    self._keypad.cancel()
                await listener.aclose()

    async def _listen(self, listener: Listener, line: PhoneLine) -> None:
        codec, resampler = MulawCodec(), Resampler(STT_RATE)
        clock = ArrivalClock(1000)  # Twilio stamps media in ms from the stream's start
        idle = self.settings.idle_timeout_s
        while True:
            try:
                async with asyncio.timeout(idle):
                    msg = await self.ws.receive()
            except TimeoutError:
                log.info("phone stream idle for %.0f s: closing", idle)
                return
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED,
                            WSMsgType.ERROR):
                return
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                event = twilio.parse_event(msg.data)
            except twilio.TwilioEventError as exc:
                log.warning("phone stream: %s (event ignored)", exc)
                continue
            match event:
                case twilio.Media(track="inbound"):
                    arrived = clock.heard(len(event.payload) / 8000, time.monotonic(),
                                          event.timestamp_ms)
                    await listener.feed(resampler.push(codec.decode(event.payload), 8000),
                                        arrived)
                case twilio.Mark():
                    line.heard(event.name)
                case twilio.Dtmf():
                    self._pressed(event.digit)
                case twilio.Stop():
                    log.info("phone call ended by the caller")
                    return

    # ---- keypad -----------------------------------------------------------------------------
    def _pressed(self, digit: str) -> None:
        """Gather digits pressed close together (or ended by ``#``) into one user turn."""
        self._digits += digit
        if self._keypad is not None:
            self._keypad.cancel()
        self._keypad = asyncio.create_task(self._keypad_entry(0.0 if digit == "#" else
                                                              KEYPAD_WAIT_S), name="keypad")

    async def _keypad_entry(self, wait_s: float) -> None:
        await asyncio.sleep(wait_s)
        digits, self._digits = self._digits, ""
        if self.conversation is None or self.line is None or not digits:
            return
        log.info("phone keypad entry: %s", digits)
        await self.conversation.start_typed(f"(keypad) {digits}",
                                            PlayoutSpeechOutput(self.line, self._emit))

    # ---- sending ----------------------------------------------------------------------------
    async def _send_text(self, text: str) -> None:
        async with self._send_lock:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_str(text)

    async def _emit(self, message: Message) -> None:
        """What the conversation says to a client: a phone has no screen; errors are logged
        and counted."""
        if isinstance(message, Error):
            self.server.metrics.errors.labels(message.code.value).inc()
            log.warning("phone call: %s: %s", message.code.value, message.message)

    # ---- lifecycle --------------------------------------------------------------------------
    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        conversation = self.conversation
        if conversation is not None:
            await conversation.close()
            session = conversation.session
            if session is not None:
                self.server.detach(session.id, self)
                await self.server.sessions.save(session)
                await self.server.sessions.release(session.id)
        if self._admitted is not None:
            self.server.admission.release(self._admitted)
            self._admitted = None

    async def shutdown(self, code: int, reason: str) -> None:
        await self.close()
        await self.cut(code, reason)

    async def cut(self, code: int, reason: str) -> None:
        await self.ws.close(code=code, message=reason.encode()[:120])

    async def hang_up(self) -> None:
        await self.shutdown(1001, "server shutting down")

