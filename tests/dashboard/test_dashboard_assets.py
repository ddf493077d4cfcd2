"""The dashboard's files as the controller serves them: types, revalidation, and preloading."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette

from iris.cluster.controller.dashboard import ASSETS_DIR, dashboard_routes, load_assets
from iris.cluster.listening_socket import bind_socket, url_for
from iris.rpc.unary_server import UnaryServer


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    sock = bind_socket("127.0.0.1", 0)
    server = UnaryServer(sock, {}, fallback=Starlette(routes=dashboard_routes()))
    server.start_in_thread()
    try:
        with httpx.Client(base_url=url_for(sock), timeout=10) as client:
            yield client
    finally:
        server.stop()


def test_dashboard_serves_index_at_root_and_modules_as_javascript(client: httpx.Client) -> None:
    index = client.get("/")
    module = client.get("/static/js/app.js")

    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert module.status_code == 200 and module.headers["content-type"].startswith("text/javascript")
    assert client.get("/static/js/nope.js").status_code == 404
    assert client.get("/static/%2E%2E/__init__.py").status_code == 404


def test_dashboard_unchanged_file_revalidates_with_304(client: httpx.Client) -> None:
    first = client.get("/static/style.css")

    again = client.get("/static/style.css", headers={"If-None-Match": first.headers["etag"]})

    assert first.headers["cache-control"] == "no-cache"
    assert again.status_code == 304 and again.content == b""


def test_dashboard_index_preloads_every_module() -> None:
    modules = {name for name in load_assets() if name.endswith(".js") and name != "js/app.js"}
    preloaded = set(re.findall(r'rel="modulepreload" href="static/([^"]+)"', (ASSETS_DIR / "index.html").read_text()))

    assert preloaded == modules


def test_dashboard_modules_never_parse_data_as_html() -> None:
    """Hostile names and log lines stay text because no module hands strings to the HTML parser."""
    for name, asset in load_assets().items():
        if name.endswith(".js"):
            source = asset.body.decode()
            assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", source), name
