"""GcsResolver against a loopback server speaking the GCE metadata server's protocol.

The GCP platform's fake Compute API does not exist yet; this fake serves what the resolver reads
(instance and project custom attributes), including the real server's refusal of requests that
lack `Metadata-Flavor: Google`.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fake_metadata import FakeMetadataServer

from iris.actor import (
    ActorClient,
    ActorNotFoundError,
    ActorPool,
    ActorServer,
    ActorUnavailableError,
    GcsResolver,
    ResolverError,
)


class Greeter:
    def __init__(self, name: str):
        self.name = name

    def hello(self, who: str) -> str:
        return f"{self.name} greets {who}"


@pytest.fixture
def metadata() -> Iterator[FakeMetadataServer]:
    server = FakeMetadataServer().start()
    yield server
    server.stop()


@pytest.fixture
def greeters() -> Iterator[list[ActorServer]]:
    servers = []
    for name in ("vm-a", "vm-b"):
        server = ActorServer(host="127.0.0.1")
        server.register("greeter", Greeter(name))
        servers.append(server.start())
    yield servers
    for server in servers:
        server.shutdown()


def test_fake_metadata_refuses_requests_without_flavor_header(metadata: FakeMetadataServer) -> None:
    response = httpx.get(f"http://{metadata.host}/computeMetadata/v1/instance/attributes/?recursive=true")
    assert response.status_code == 403


def test_gcs_resolver_instance_attribute_calls_the_actor(
    metadata: FakeMetadataServer, greeters: list[ActorServer]
) -> None:
    metadata.attributes["instance"] = {"iris_actor_greeter": greeters[0].url, "startup-script": "true"}
    resolver = GcsResolver(metadata.host)
    assert resolver.known_names() == ["greeter"]
    assert ActorClient(resolver, "greeter").hello("you") == "vm-a greets you"
    assert all("recursive=true" in path for path in metadata.requests)


def test_gcs_resolver_merges_instance_and_project_attributes_for_a_pool(
    metadata: FakeMetadataServer, greeters: list[ActorServer]
) -> None:
    metadata.attributes["instance"] = {"iris_actor_greeter": greeters[0].url}
    metadata.attributes["project"] = {"iris_actor_greeter": f"{greeters[0].url},{greeters[1].url}"}
    resolver = GcsResolver(metadata.host)
    assert [e.url for e in resolver.resolve("greeter")] == [greeters[0].url, greeters[1].url]
    with ActorPool(resolver, "greeter") as pool:
        assert sorted(r.value for r in pool.broadcast("hello", "all")) == [
            "vm-a greets all",
            "vm-b greets all",
        ]


def test_gcs_resolver_reads_metadata_host_from_environment(
    metadata: FakeMetadataServer, greeters: list[ActorServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCE_METADATA_HOST", metadata.host)
    metadata.attributes["project"] = {"iris_actor_greeter": greeters[1].url}
    assert ActorClient(GcsResolver(), "greeter").hello("env") == "vm-b greets env"


def test_gcs_resolver_missing_actor_names_the_published_ones(metadata: FakeMetadataServer) -> None:
    metadata.attributes["project"] = {"iris_actor_store": "http://10.1.2.3:9000"}
    resolver = GcsResolver(metadata.host)
    with pytest.raises(
        ActorNotFoundError, match=r"no actor 'greeter' in namespace 'gcp metadata at .*'; known: store"
    ):
        ActorClient(resolver, "greeter", resolve_timeout=0.1).hello("nobody")


def test_gcs_resolver_unreachable_metadata_server_raises_resolver_error(metadata: FakeMetadataServer) -> None:
    host = metadata.host
    metadata.stop()
    with pytest.raises(
        ResolverError, match=f"cannot read GCP metadata at http://{host}/computeMetadata/v1/instance"
    ):
        GcsResolver(host, timeout=1).resolve("greeter")


def test_actor_client_unreachable_resolver_source_says_lookup_failed(metadata: FakeMetadataServer) -> None:
    host = metadata.host
    metadata.stop()
    client = ActorClient(GcsResolver(host, timeout=1), "greeter", resolve_timeout=0.2)
    with pytest.raises(
        ActorUnavailableError,
        match=f"cannot look up actor 'greeter' in namespace .*: cannot read GCP metadata at http://{host}",
    ):
        client.hello("nobody")
