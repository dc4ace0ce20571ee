"""The bundled page and the embeddable client, served as a browser expects: compressed (gzip
when the request accepts it), with a strong ETag per representation so a revalidation costs a
``304`` without a body, and cache headers per file (the page revalidates every time; the
client's modules are shared by embedding sites and may be cached for five minutes).

Files are read once and kept with their gzip form; a file changed on disk (development) is read
again on its next request.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

from aiohttp import web

__all__ = ["StaticFiles"]

# The embeddable client: ES modules in web_client/client/, served at /client/<name>. Embedding
# sites import llmrtc.js, which imports the rest; all are cached alike.
CLIENT_MODULES = (
    "llmrtc.js", "client.js", "connection.js", "signaling.js", "peer.js", "capture.js",
    "capture-worklet.js", "playback.js", "events.js", "router.js", "state.js", "scope.js",
    "backoff.js", "codecs.js", "endpointer.js", "errors.js",
)
_CLIENT_CACHE = "public, max-age=300"
# The bundled page's own modules (web_client/page/), imported by app.js; revalidated like it.
PAGE_MODULES = ("conversation.js", "dom.js", "notices.js", "playbooks.js", "timeline.js")

# URL path -> (file in the static folder, Cache-Control); anything else is 404
ROUTES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "no-cache"),
    "/index.html": ("index.html", "no-cache"),
    "/app.js": ("app.js", "no-cache"),
    "/style.css": ("style.css", "no-cache"),
    **{f"/page/{name}": (f"page/{name}", "no-cache") for name in PAGE_MODULES},
    **{f"/client/{name}": (f"client/{name}", _CLIENT_CACHE) for name in CLIENT_MODULES},
    "/favicon.svg": ("favicon.svg", "public, max-age=86400"),
    "/favicon.ico": ("favicon.svg", "public, max-age=86400"),  # browsers ask for it unbidden
}
_COMPRESS_FROM = 512  # smaller bodies gain nothing from gzip


@dataclass(frozen=True)
class _File:
    stamp: tuple[int, int]  # (mtime_ns, size): read again when it changes
    content_type: str
    plain: bytes
    etag: str
    gzipped: bytes | None
    gzip_etag: str


def _accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().lower()
            return not (q.startswith("q=") and float(q[2:] or 0) == 0.0)
    return False


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


class StaticFiles:
    def __init__(self, folder: Path | None) -> None:
        self._folder = folder
        self._files: dict[str, _File] = {}

    def routes(self, path: str) -> bool:
        return path in ROUTES

    def _load(self, name: str) -> _File | None:
        if self._folder is None or not (path := self._folder / name).is_file():
            return None
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._files.get(name)
        if cached is not None and cached.stamp == stamp:
            return cached
        data = path.read_bytes()
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith(("javascript", "svg+xml")):
            ctype += "; charset=utf-8"
        digest = hashlib.sha256(data).hexdigest()[:32]
        squeezed = gzip.compress(data, compresslevel=9, mtime=0)
        gzipped = squeezed if len(data) >= _COMPRESS_FROM and len(squeezed) < len(data) \
            else None
        loaded = _File(stamp, ctype, data, f'"{digest}"', gzipped, f'"{digest}-gz"')
        self._files[name] = loaded
        return loaded

    def answer(self, path: str, headers: Mapping[str, str]) -> web.Response | None:
        """The file for ``path`` (one of ``ROUTES``) or ``304``, given the request's
        ``headers``; None when the file is not there."""
        name, cache = ROUTES[path]
        file = self._load(name)
        if file is None:
            return None
        zipped = file.gzipped is not None and _accepts_gzip(
            headers.get("Accept-Encoding", ""))
        etag = file.gzip_etag if zipped else file.etag
        answer = {"ETag": etag, "Cache-Control": cache, "Vary": "Accept-Encoding",
                  "Access-Control-Allow-Origin": "*"}
        if _matches(headers.get("If-None-Match"), etag):
            return web.Response(status=HTTPStatus.NOT_MODIFIED, headers=answer)
        body = file.gzipped if zipped and file.gzipped is not None else file.plain
        if zipped:
            answer["Content-Encoding"] = "gzip"  # compressed here once, never again by aiohttp
        answer["Content-Type"] = file.content_type
        return web.Response(status=HTTPStatus.OK, headers=answer, body=body)
