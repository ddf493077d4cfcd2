"""ActorServer inside a task registers with a real controller: one endpoint per actor, removed on
shutdown, and an earlier attempt's leftover replaced by the new attempt's.

The controller runs in this process without workers; the job stays pending, which is enough to
own endpoints, and the test plays the task by setting the variables a worker gives one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.actor import ActorClient, ActorServer
from iris.client import IrisClient
from iris.client.resolver import ClusterResolver
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.types import Entrypoint


class Named:
    def __init__(self, label: str):
        self.label = label

    def who(self) -> str:
        return self.label


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[IrisClient]:
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "state",
            bundle_prefix=f"file://{tmp_path}/bundles",
            host="127.0.0.1",
            port=0,
        )
    )
    daemon.start_in_thread()
    client = IrisClient.remote(daemon.url)
    try:
        client.submit(Entrypoint.from_command("true"), name="serve", replicas=2, workspace=tmp_path)
        yield client
    finally:
        client.close()
        daemon.stop()


def play_task(monkeypatch: pytest.MonkeyPatch, controller_url: str, task_index: int, attempt: int) -> None:
    for key, value in {
        "IRIS_JOB_ID": "/serve",
        "IRIS_TASK_ID": f"/serve/{task_index}",
        "IRIS_TASK_INDEX": str(task_index),
        "IRIS_ATTEMPT_ID": str(attempt),
        "IRIS_CONTROLLER_ADDRESS": controller_url,
    }.items():
        monkeypatch.setenv(key, value)


def start_server(label: str, *names: str) -> ActorServer:
    server = ActorServer()
    for name in names:
        server.register(name, Named(label))
    return server.start()


def test_actor_server_in_task_registers_each_actor_and_unregisters_on_shutdown(
    controller: IrisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    play_task(monkeypatch, controller.url, task_index=0, attempt=0)
    server = start_server("task-0", "left", "right")
    resolver = ClusterResolver(controller.url, namespace="serve")
    assert [(e.name, e.address) for e in controller.list_endpoints("/serve/")] == [
        ("/serve/left", server.url),
        ("/serve/right", server.url),
    ]
    assert resolver.known_names() == ["left", "right"]
    assert ActorClient(resolver, "left").who() == "task-0"

    server.shutdown()

    assert controller.list_endpoints("/serve/") == []


def test_actor_server_late_registered_actor_is_published_at_once(
    controller: IrisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    play_task(monkeypatch, controller.url, task_index=0, attempt=0)
    server = start_server("task-0")
    try:
        server.register("late", Named("late"))
        resolver = ClusterResolver(controller.url, namespace="serve")
        assert ActorClient(resolver, "late").who() == "late"
    finally:
        server.shutdown()


def test_actor_server_new_attempt_replaces_only_its_own_tasks_old_endpoint(
    controller: IrisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    play_task(monkeypatch, controller.url, task_index=1, attempt=0)
    replica = start_server("task-1", "calc")
    play_task(monkeypatch, controller.url, task_index=0, attempt=0)
    first = start_server("task-0 attempt 0", "calc")
    # The first attempt's worker died: nothing unregistered its endpoint.
    play_task(monkeypatch, controller.url, task_index=0, attempt=1)
    second = start_server("task-0 attempt 1", "calc")
    try:
        endpoints = ClusterResolver(controller.url, namespace="serve").resolve("calc")
        assert sorted(
            (e.metadata["iris.task_id"], e.metadata["iris.attempt_id"], e.url) for e in endpoints
        ) == [
            ("/serve/0", "1", second.url),
            ("/serve/1", "0", replica.url),
        ]
    finally:
        for server in (first, second, replica):
            server.shutdown()


def test_cluster_resolver_ignores_endpoints_that_are_not_actors(controller: IrisClient) -> None:
    controller.register_endpoint("/serve", "dashboard", "http://127.0.0.1:1")
    resolver = ClusterResolver(controller.url, namespace="/serve")
    assert resolver.resolve("dashboard") == []
    assert resolver.known_names() == []
