"""The controller's browser dashboard: static ES modules served at `/`, reading the cluster only
through the Connect JSON API beside them. Nothing here renders data on the server.

The files are read once, when the routes are built, and served from memory: a page load asks for
a dozen small modules at once, and a busy controller should not spend a thread hop on each.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

ASSETS_DIR = Path(__file__).parent / "static"
INDEX = "index.html"
# Revalidated on every load (a cheap 304) so that an upgraded controller never serves stale code.
CACHE_CONTROL = "no-cache"
# The kinds of file the dashboard has, so that building its routes does not look them up in
# `mimetypes`, which first reads every mime.types file on the host: tens of milliseconds on the
# way to the controller serving. ES modules must be served as JavaScript.
MEDIA_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


def load_assets(directory: Path = ASSETS_DIR) -> dict[str, Asset]:
    """Every file under `directory`, by its path relative to it ("js/app.js")."""
    assets = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        body = path.read_bytes()
        media_type = MEDIA_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        assets[path.relative_to(directory).as_posix()] = Asset(body, media_type, etag)
    return assets


def dashboard_routes(directory: Path = ASSETS_DIR) -> list[BaseRoute]:
    assets = load_assets(directory)

    def serve(name: str, request: Request) -> Response:
        asset = assets.get(name)
        if asset is None:
            return PlainTextResponse(f"no dashboard file {name}", status_code=404)
        headers = {"ETag": asset.etag, "Cache-Control": CACHE_CONTROL}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.media_type, headers=headers)

    async def index(request: Request) -> Response:
        return serve(INDEX, request)

    async def static(request: Request) -> Response:
        return serve(request.path_params["name"], request)

    return [Route("/", index), Route("/static/{name:path}", static)]
