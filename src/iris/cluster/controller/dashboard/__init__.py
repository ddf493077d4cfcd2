"""The controller's browser dashboard: static ES modules served at `/`, reading the cluster only
through the Connect JSON API beside them. Nothing here renders data on the server."""

from __future__ import annotations

from pathlib import Path

from starlette.responses import FileResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

ASSETS_DIR = Path(__file__).parent / "static"
# Modules are revalidated on every load so that an upgraded controller never serves stale code.
NO_CACHE = {"Cache-Control": "no-cache"}


class _RevalidatedFiles(StaticFiles):
    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers.update(NO_CACHE)
        return response


async def _index(request) -> FileResponse:
    return FileResponse(ASSETS_DIR / "index.html", headers=NO_CACHE)


def dashboard_routes() -> list[BaseRoute]:
    return [Route("/", _index), Mount("/static", app=_RevalidatedFiles(directory=ASSETS_DIR), name="dashboard")]
