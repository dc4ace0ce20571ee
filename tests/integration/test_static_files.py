"""The page and the client served as a browser expects (issue 22, item 5): gzip when accepted,
strong ETags with 304 on revalidation, cache headers per file, an icon."""

from __future__ import annotations

import asyncio
import gzip
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from voice_server.server.static import CLIENT_MODULES, ROUTES

pytestmark = pytest.mark.slow

WEB = Path(__file__).resolve().parents[2] / "web_client"


def fetch(server, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def get(server, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return await asyncio.to_thread(fetch, server, path, **headers)


@pytest.mark.parametrize("path,name,cache", [
    ("/", "index.html", "no-cache"),
    ("/app.js", "app.js", "no-cache"),
    ("/style.css", "style.css", "no-cache"),
    ("/client/llmrtc.js", "client/llmrtc.js", "public, max-age=300"),
    ("/client/client.js", "client/client.js", "public, max-age=300"),
])
async def test_compressed_validated_and_cached(scripted_server, path, name, cache):
    original = (WEB / name).read_bytes()
    status, headers, body = await get(scripted_server, path, **{"Accept-Encoding": "gzip, br"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == original and len(body) < len(original) / 2
    assert headers["Cache-Control"] == cache and headers["Vary"] == "Accept-Encoding"
    etag = headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")  # strong
    status, headers, body = await get(scripted_server, path, **{
        "Accept-Encoding": "gzip", "If-None-Match": etag})
    assert status == 304 and body == b"" and headers["ETag"] == etag
    # a client without gzip gets the plain bytes, under its own ETag
    status, plain_headers, body = await get(scripted_server, path)
    assert status == 200 and body == original and "Content-Encoding" not in plain_headers
    assert plain_headers["ETag"] != etag
    status, _, _ = await get(scripted_server, path, **{"If-None-Match": etag})
    assert status == 200  # the gzip variant's tag does not validate the plain one


async def test_the_page_has_an_icon(scripted_server):
    for path in ("/favicon.ico", "/favicon.svg"):
        status, headers, body = await get(scripted_server, path)
        assert status == 200 and headers["Content-Type"].startswith("image/svg+xml")
        assert body.startswith(b"<svg")
    _, _, page = await get(scripted_server, "/")
    assert b'rel="icon" href="favicon.svg"' in page


async def test_unknown_files_are_404(scripted_server):
    for path in ("/llmrtc.js.map", "/../pyproject.toml", "/client/app.js", "/llmrtc.js",
                 "/client/../app.js", "/client/client/llmrtc.js"):
        status, _, _ = await get(scripted_server, path)
        assert status == 404


def test_every_client_module_is_served_and_nothing_else():
    """Each ES module of the client in web_client/client/ has its route (a module left out would
    404 in the browser and break the import of llmrtc.js), cached like llmrtc.js."""
    on_disk = sorted(p.name for p in (WEB / "client").glob("*.js"))
    assert sorted(CLIENT_MODULES) == on_disk
    for name in on_disk:
        assert ROUTES[f"/client/{name}"] == (f"client/{name}", "public, max-age=300")


def test_client_imports_resolve_to_served_modules():
    """Every relative import in the client's modules names a module that is served."""
    imported = set()
    for path in (WEB / "client").glob("*.js"):
        for target in re.findall(r'^(?:import|export) [^;]*? from "(\./[^"]+)";', path.read_text(),
                                 flags=re.MULTILINE | re.DOTALL):
            assert target.removeprefix("./") in CLIENT_MODULES, (path.name, target)
            imported.add(target)
    assert {"./client.js", "./state.js", "./peer.js"} <= imported
