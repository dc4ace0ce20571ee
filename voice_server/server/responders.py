"""Who answers a session's turns: the plain chat responder, or the current version of the
playbook the session names (one ``PlaybookResponder`` per playbook and version, sharing one
HTTP client for the playbooks' webhooks).

``async with Responders(settings, router, history, warm=...) as responders:`` opens the
playbooks folder and checks that the playbooks the settings name are served. ``warm``, when
given, is handed each new playbook responder so that its stages' prompts are computed ahead
(``warm.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path

import aiohttp
from aiohttp import web

from ..config import ConfigError, Settings
from ..llm import LLMRouter
from ..pipeline.turn import ChatResponder, HistoryWindow, Responder
from ..playbook import PlaybookRegistry, PlaybookResponder, ToolRunner
from ..serving import AsyncService
from .http import json_response
from .sessions import Session

__all__ = ["PLAYBOOKS_DIR", "Responders"]

log = logging.getLogger(__name__)

PLAYBOOKS_DIR = Path(__file__).resolve().parents[2] / "playbooks"


class Responders(AsyncService):
    def __init__(self, settings: Settings, router: LLMRouter, history: HistoryWindow, *,
                 warm: Callable[[PlaybookResponder], None] | None = None) -> None:
        self.settings = settings
        self.router = router
        self.history = history
        self._warm = warm
        self.chat = ChatResponder(
            router, system_prompt=settings.system_prompt, model=settings.llm_model,
            temperature=settings.llm_temperature, max_tokens=settings.llm_max_tokens,
            history=history, timeout_s=settings.llm_timeout_s)
        self.folder = Path(settings.playbooks_dir) if settings.playbooks_dir else PLAYBOOKS_DIR
        if settings.playbooks_dir and not self.folder.is_dir():  # a typo served none
            raise ConfigError(f"playbooks_dir {settings.playbooks_dir} is not a folder")
        self.playbooks = PlaybookRegistry(self.folder) if self.folder.is_dir() else None
        self.by_version: dict[tuple[str, int], PlaybookResponder] = {}
        self.webhooks: aiohttp.ClientSession | None = None  # every playbook version's

    async def start(self) -> None:
        if self.playbooks is not None:
            await self.playbooks.__aenter__()
            if self.playbooks.errors:
                log.warning("invalid playbooks (not served): %s", sorted(self.playbooks.errors))
        self._check_named()

    async def aclose(self) -> None:
        if self.playbooks is not None:
            await self.playbooks.aclose()
        if self.webhooks is not None:  # the playbooks' responders own nothing else
            await self.webhooks.close()
            self.webhooks = None

    def _check_named(self) -> None:
        """A playbook the settings name must be served, or every connection (every call)
        would get PLAYBOOK_ERROR: said at start, before the models load."""
        for option, wanted in (("default_playbook", self.settings.default_playbook),
                               ("phone_playbook", self.settings.phone_playbook)):
            if wanted is None:
                continue
            why = (f"no playbooks folder {self.folder}" if self.playbooks is None
                   else self.playbooks.why_absent(wanted))
            if why is not None:
                raise ConfigError(f"{option} {wanted!r}: {why}")

    def known(self, playbook_id: str) -> bool:
        return self.playbooks is not None and playbook_id in self.playbooks

    def _served(self, session: Session) -> str | None:
        """The playbook the session names, if it is served."""
        playbook_id = session.meta.get("playbook")
        return playbook_id if playbook_id and self.known(playbook_id) else None

    def for_session(self, session: Session) -> Responder:
        """The session's playbook (current version) or the plain chat responder."""
        playbook_id = self._served(session)
        return self.chat if playbook_id is None else self.playbook(playbook_id)

    def greeting_for(self, session: Session) -> str | None:
        """The session's playbook's ``greeting`` (the agent speaks first on a call)."""
        if (playbook_id := self._served(session)) is None:
            return None
        assert self.playbooks is not None
        return self.playbooks.get(playbook_id).greeting

    def playbook(self, playbook_id: str) -> PlaybookResponder:
        """The responder of the playbook's current version; a new one is handed to ``warm``
        (its stages' prompts computed ahead while no call is live)."""
        assert self.playbooks is not None
        key = (playbook_id, self.playbooks.version)
        responder = self.by_version.get(key)
        if responder is None:
            s = self.settings
            playbook = self.playbooks.get(playbook_id)
            self.webhooks = self.webhooks or aiohttp.ClientSession()
            # No executor given: synchronous tool handlers run on the loop's default one, so a
            # slow handler never takes a compute-pool thread that STT or TTS is waiting for.
            responder = PlaybookResponder(
                playbook, self.router, history=self.history, timeout_s=s.llm_timeout_s,
                model=s.llm_model, temperature=s.llm_temperature, max_tokens=s.llm_max_tokens,
                tools=ToolRunner(playbook, http=self.webhooks))
            # older versions' responders hold nothing to close: a turn still using one keeps
            # it, and the rest are forgotten (each playbook edit left one per playbook before)
            for old in [k for k in self.by_version if k[1] < key[1]]:
                del self.by_version[old]
            self.by_version[key] = responder
            if self._warm is not None:
                self._warm(responder)
        return responder

    def warm_all(self) -> None:
        """Hand every served playbook's responder to ``warm``, the named ones first."""
        if self._warm is None or self.playbooks is None:
            return
        named = [n for n in (self.settings.default_playbook, self.settings.phone_playbook) if n]
        for playbook_id in dict.fromkeys([*named, *self.playbooks.ids()]):
            self.playbook(playbook_id)

    def model_restarted(self) -> None:
        """The embedded model's worker died: the prompts it computed ahead died with it, so
        the current playbooks' are handed to ``warm`` again."""
        if self._warm is None or self.playbooks is None:
            return
        for (_, made_for), responder in self.by_version.items():
            if made_for == self.playbooks.version:
                self._warm(responder)

    async def list_handler(self, request: web.Request) -> web.StreamResponse:
        """``GET /playbooks``: the served playbooks and the default one."""
        items = self.playbooks.list() if self.playbooks is not None else []
        return json_response(HTTPStatus.OK, {"default": self.settings.default_playbook,
                                             "playbooks": items})
