"""Optional connection auth and TURN credentials.

Sans-I/O: pure functions over strings and a clock.

* **Tokens** are ``base64url(json payload) "." base64url(HMAC-SHA256(secret, payload part))``;
  the payload holds ``sub`` (the principal) and ``exp`` (Unix seconds). A client presents one as
  the ``token`` query parameter of the WebSocket URL or as its first message
  ``{"type": "auth", "token": "..."}``. A session remembers its principal; only the same principal
  may resume it (spec: "Session Reconnection").
* **TURN credentials** follow the TURN REST API scheme coturn implements with
  ``use-auth-secret``: username ``"<expiry>:<session tag>"``, credential
  ``base64(HMAC-SHA1(secret, username))``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["AuthError", "Principal", "TokenSigner", "auth_message_token", "query_token",
           "turn_credentials"]

MAX_TOKEN_CHARS = 4096


class AuthError(Exception):
    """A token is missing, malformed, forged or expired (the message says which)."""


@dataclass(frozen=True)
class Principal:
    subject: str
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    """Issues and checks HMAC tokens with one shared secret."""

    def __init__(self, secret: str, *, clock: Callable[[], float] = time.time) -> None:
        if not secret:
            raise ValueError("the auth secret must not be empty")
        self._key = secret.encode()
        self._clock = clock

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest())

    def issue(self, subject: str, ttl_s: float) -> str:
        payload = {"sub": subject, "exp": int(self._clock() + ttl_s)}
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{body}.{self._mac(body)}"

    def verify(self, token: str | None) -> Principal:
        if not token:
            raise AuthError("a token is required")
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
            raise AuthError("malformed token")
        body, mac = token.split(".")
        try:
            body.encode("ascii")
            mac.encode("ascii")
        except UnicodeEncodeError:
            raise AuthError("malformed token") from None
        if not hmac.compare_digest(self._mac(body), mac):
            raise AuthError("invalid token signature")
        try:
            payload = json.loads(_unb64(body))
        except ValueError:
            raise AuthError("malformed token") from None
        if not isinstance(payload, dict):
            raise AuthError("malformed token")
        sub, exp = payload.get("sub"), payload.get("exp")
        if not isinstance(sub, str) or not sub or not isinstance(exp, int | float) \
                or isinstance(exp, bool):
            raise AuthError("malformed token")
        if exp <= self._clock():
            raise AuthError("token expired")
        return Principal(subject=sub, expires_at=float(exp))


def query_token(path: str) -> str | None:
    """The ``token`` query parameter of a request path, if any."""
    values = parse_qs(urlsplit(path).query).get("token")
    return values[0] if values else None


def auth_message_token(raw: str | bytes) -> str | None:
    """The token of an ``{"type": "auth", "token": ...}`` message, else None."""
    if isinstance(raw, bytes) or len(raw) > MAX_TOKEN_CHARS + 64:
        return None
    try:
        data: Any = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("type") != "auth":
        return None
    token = data.get("token")
    return token if isinstance(token, str) else None


def turn_credentials(secret: str, urls: list[str], user: str, ttl_s: int,
                     now: float | None = None) -> dict[str, Any]:
    """One RTCIceServer with time-limited TURN REST API credentials. ``user`` lands in the
    TURN server's logs: a session's tag (``metrics.session_tag``), never its id."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    username = f"{expiry}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return {"urls": list(urls), "username": username,
            "credential": base64.b64encode(digest).decode("ascii")}
