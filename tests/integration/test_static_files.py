"""The page and the client served as a browser expects (issue 22, item 5): gzip when accepted,
strong ETags with 304 on revalidation, cache headers per file, an icon."""

from __future__ import annotations

import asyncio
import gzip
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

import pytest

from voice_server.server.static import CLIENT_MODULES, PAGE_MODULES, ROUTES

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
    ("/page/conversation.js", "page/conversation.js", "no-cache"),
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


@pytest.mark.parametrize("folder,names,cache", [
    ("client", CLIENT_MODULES, "public, max-age=300"),
    ("page", PAGE_MODULES, "no-cache"),
])
def test_every_module_is_served(folder, names, cache):
    """Each ES module in web_client/client/ (the client) and web_client/page/ (the page) has its
    route, a module left out would 404 in the browser and break the import of llmrtc.js or
    app.js; the client's are cached like llmrtc.js, the page's revalidated like app.js."""
    on_disk = sorted(p.name for p in (WEB / folder).glob("*.js"))
    assert sorted(names) == on_disk
    for name in on_disk:
        assert ROUTES[f"/{folder}/{name}"] == (f"{folder}/{name}", cache)


def test_module_imports_resolve_to_served_modules():
    """Every relative import in a served module names a served module (resolved as the browser
    does, against the importing module's URL)."""
    imported = set()
    for path, (name, _) in ROUTES.items():
        if not name.endswith(".js"):
            continue
        for target in re.findall(r'^(?:import|export) [^;]*? from "(\.\.?/[^"]+)";',
                                 (WEB / name).read_text(), flags=re.MULTILINE | re.DOTALL):
            url = urljoin(path, target)
            assert url in ROUTES, (path, target)
            imported.add(url)
    assert {"/client/llmrtc.js", "/client/client.js", "/page/conversation.js"} <= imported
