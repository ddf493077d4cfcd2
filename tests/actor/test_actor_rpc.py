"""Actor servers and clients on loopback: real uvicorn servers, real Connect calls, no cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from iris.actor import (
    ActorClient,
    ActorNotFoundError,
    ActorPool,
    ActorRemoteError,
    ActorServer,
    ActorUnavailableError,
    FixedResolver,
    ResolvedEndpoint,
)
from iris.actor.resolver import parse_metadata_endpoints
from iris.cli.actor import call_arguments
from iris.client.client import IrisError
from iris.time import wait_until


class LockedError(Exception):
    """Holds a lock, so it cannot be pickled and must travel as type, message and traceback."""

    def __init__(self, message: str):
        super().__init__(message)
        self.lock = threading.Lock()


class Calculator:
    def __init__(self, label: str = "calc"):
        self.label = label
        self.calls = 0
        self.running = 0
        self.max_running = 0

    def add(self, a: int, b: int = 0) -> int:
        """Add two numbers."""
        self.calls += 1
        return a + b

    async def double_later(self, x: int, delay: float = 0.0) -> int:
        await asyncio.sleep(delay)
        return 2 * x

    def who(self) -> str:
        return self.label

    def divide(self, a: int, b: int) -> float:
        return a / b

    def locked_failure(self) -> None:
        raise LockedError("cannot travel whole")

    def slow(self, seconds: float) -> int:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        time.sleep(seconds)
        self.running -= 1
        return self.max_running


class TableResolver:
    """Resolves from a dict the test edits, standing in for a registry whose contents change."""

    namespace = "test"

    def __init__(self) -> None:
        self.table: dict[str, list[str]] = {}

    def resolve(self, name: str) -> list[ResolvedEndpoint]:
        return [ResolvedEndpoint(url=url, actor_id=url) for url in self.table.get(name, [])]

    def known_names(self) -> list[str]:
        return sorted(self.table)


def serve(name: str, instance: object) -> ActorServer:
    server = ActorServer(host="127.0.0.1")
    server.register(name, instance)
    return server.start()


@pytest.fixture
def calc_server() -> Iterator[ActorServer]:
    server = serve("calc", Calculator())
    yield server
    server.shutdown()


@pytest.fixture
def calc(calc_server: ActorServer) -> Iterator[ActorClient]:
    with ActorClient(FixedResolver({"calc": calc_server.url}), "calc", resolve_timeout=5) as client:
        yield client


# ---------------------------------------------------------------- calls


def test_actor_client_sync_and_async_methods_return_their_values(calc: ActorClient) -> None:
    assert calc.add(2, 3) == 5
    assert calc.add(2, b=40) == 42
    assert calc.double_later(21) == 42
    assert calc.call("add", 1, 1) == 2


def test_actor_client_method_exception_raises_same_type_with_remote_traceback(calc: ActorClient) -> None:
    with pytest.raises(ZeroDivisionError, match="division by zero") as raised:
        calc.divide(1, 0)
    notes = "\n".join(raised.value.__notes__)
    assert "actor 'calc'" in notes and "remote traceback" in notes
    assert "in divide" in notes and "return a / b" in notes


def test_actor_client_unpicklable_exception_raises_actor_remote_error_with_type(calc: ActorClient) -> None:
    with pytest.raises(ActorRemoteError, match="LockedError: cannot travel whole") as raised:
        calc.locked_failure()
    assert raised.value.error_type.endswith("LockedError")
    assert "locked_failure" in "\n".join(raised.value.__notes__)


def test_actor_client_unknown_method_raises_attribute_error_listing_methods(calc: ActorClient) -> None:
    with pytest.raises(AttributeError, match=r"no method 'predict' \(methods: add, divide, double_later"):
        calc.predict(1)


def test_actor_client_unknown_actor_raises_not_found_naming_known_actors(calc_server: ActorServer) -> None:
    resolver = FixedResolver({"calc": calc_server.url, "store": calc_server.url}, namespace="default")
    client = ActorClient(resolver, "inference", resolve_timeout=0.2)
    with pytest.raises(ActorNotFoundError) as raised:
        client.predict({"text": "hello"})
    assert str(raised.value) == "no actor 'inference' in namespace 'default'; known: calc, store"


def test_actor_client_list_methods_reports_signatures_and_docstrings(calc: ActorClient) -> None:
    methods = {m.name: m for m in calc.list_methods()}
    assert set(methods) == {"add", "divide", "double_later", "locked_failure", "slow", "who"}
    assert methods["add"].signature == "(a: 'int', b: 'int' = 0) -> 'int'"
    assert methods["add"].docstring == "Add two numbers."


def test_actor_server_runs_plain_methods_one_at_a_time(calc: ActorClient) -> None:
    with ThreadPoolExecutor(4) as threads:
        peaks = list(threads.map(lambda _: calc.slow(0.05), range(4)))
    assert max(peaks) == 1


def test_actor_server_overlaps_async_methods(calc_server: ActorServer) -> None:
    resolver = FixedResolver({"calc": calc_server.url})
    clients = [ActorClient(resolver, "calc") for _ in range(4)]
    started = time.monotonic()
    with ThreadPoolExecutor(4) as threads:
        values = list(threads.map(lambda c: c.double_later(1, delay=0.5), clients))
    elapsed = time.monotonic() - started
    assert values == [2, 2, 2, 2]
    # Run one after the other they would need 2 s.
    assert elapsed < 1.5


def test_actor_server_with_threads_answers_async_calls_while_plain_method_runs() -> None:
    calculator = Calculator()
    server = ActorServer(host="127.0.0.1", max_threads=1)
    server.register("calc", calculator)
    server.start()
    try:
        resolver = FixedResolver({"calc": server.url})
        slow_client, quick_client = ActorClient(resolver, "calc"), ActorClient(resolver, "calc")
        with ThreadPoolExecutor(1) as threads:
            slow = threads.submit(slow_client.slow, 2.0)
            wait_until(lambda: calculator.running == 1, 5, 0.01, "the slow method to start")
            started = time.monotonic()
            assert quick_client.double_later(4) == 8
            assert time.monotonic() - started < 1.5
            assert not slow.done()
            assert slow.result() == 1
    finally:
        server.shutdown()


def test_actor_server_two_actors_on_one_port_are_called_separately() -> None:
    server = ActorServer(host="127.0.0.1")
    server.register("left", Calculator("left"))
    server.register("right", Calculator("right"))
    server.start()
    try:
        resolver = FixedResolver({"left": server.url, "right": server.url})
        assert ActorClient(resolver, "left").who() == "left"
        assert ActorClient(resolver, "right").who() == "right"
    finally:
        server.shutdown()


def test_actor_server_named_port_outside_task_raises_actionable_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("IRIS_JOB_ID", raising=False)
    with pytest.raises(IrisError, match="named port 'actor' needs an Iris task"):
        ActorServer(port="actor")


def test_actor_server_named_port_missing_in_task_says_how_to_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_JOB_ID", "/serve")
    monkeypatch.setenv("IRIS_PORT_HTTP", "8080")
    with pytest.raises(
        IrisError, match=r"no named port 'actor' \(it has: http\); submit the job with ports=\['actor'\]"
    ):
        ActorServer(port="actor")


def test_actor_server_register_rejects_duplicate_and_slashed_names(calc_server: ActorServer) -> None:
    with pytest.raises(ValueError, match="already registered"):
        calc_server.register("calc", Calculator())
    with pytest.raises(ValueError, match="contain no '/'"):
        calc_server.register("a/b", Calculator())


# ---------------------------------------------------------------- failover


def test_actor_client_server_moved_re_resolves_and_next_call_succeeds() -> None:
    resolver = TableResolver()
    first = serve("calc", Calculator("first"))
    resolver.table["calc"] = [first.url]
    client = ActorClient(resolver, "calc", resolve_timeout=10)
    assert client.who() == "first"
    first.shutdown()
    second = serve("calc", Calculator("second"))
    try:
        # The registry still lists the dead server until the new one replaces it, as after a retry.
        resolver.table["calc"] = [first.url]
        threading.Timer(0.3, lambda: resolver.table.__setitem__("calc", [second.url])).start()
        assert client.who() == "second"
    finally:
        second.shutdown()
        client.close()


def test_actor_client_dead_endpoint_past_deadline_raises_unavailable() -> None:
    server = serve("calc", Calculator())
    url = server.url
    server.shutdown()
    client = ActorClient(FixedResolver({"calc": url}), "calc", resolve_timeout=0.3)
    with pytest.raises(
        ActorUnavailableError, match=r"actor 'calc' in namespace 'fixed' did not answer within 0.3s"
    ):
        client.who()


# ---------------------------------------------------------------- pools


@pytest.fixture
def three_replicas() -> Iterator[list[ActorServer]]:
    servers = [serve("calc", Calculator(f"replica-{i}")) for i in range(3)]
    yield servers
    for server in servers:
        server.shutdown()


def test_actor_pool_round_robin_spreads_calls_evenly(three_replicas: list[ActorServer]) -> None:
    resolver = FixedResolver({"calc": [s.url for s in three_replicas]})
    with ActorPool(resolver, "calc") as pool:
        served = Counter(pool.who() for _ in range(30))
    assert served == {"replica-0": 10, "replica-1": 10, "replica-2": 10}


def test_actor_pool_broadcast_reports_stopped_replica_as_one_error(three_replicas: list[ActorServer]) -> None:
    resolver = FixedResolver({"calc": [s.url for s in three_replicas]})
    with ActorPool(resolver, "calc") as pool:
        assert [r.value for r in pool.broadcast("who")] == ["replica-0", "replica-1", "replica-2"]
        three_replicas[1].shutdown()
        results = pool.broadcast("who")
    assert [r.ok for r in results] == [True, False, True]
    assert isinstance(results[1].error, ActorUnavailableError)
    assert three_replicas[1].url in str(results[1].error)


def test_actor_pool_broadcast_returns_method_exceptions_per_endpoint(
    three_replicas: list[ActorServer],
) -> None:
    resolver = FixedResolver({"calc": [s.url for s in three_replicas]})
    with ActorPool(resolver, "calc") as pool:
        results = pool.broadcast("divide", 1, 0)
    assert all(isinstance(r.error, ZeroDivisionError) for r in results)


def test_actor_pool_follows_endpoints_appearing_and_vanishing(three_replicas: list[ActorServer]) -> None:
    resolver = TableResolver()
    resolver.table["calc"] = [three_replicas[0].url]
    with ActorPool(resolver, "calc", refresh_interval=0) as pool:
        assert {pool.who() for _ in range(6)} == {"replica-0"}
        resolver.table["calc"] = [s.url for s in three_replicas]
        assert {pool.who() for _ in range(6)} == {"replica-0", "replica-1", "replica-2"}
        resolver.table["calc"] = [three_replicas[2].url]
        assert {pool.who() for _ in range(6)} == {"replica-2"}


def test_actor_pool_skips_dead_replica_without_caller_noticing(three_replicas: list[ActorServer]) -> None:
    resolver = FixedResolver({"calc": [s.url for s in three_replicas]})
    three_replicas[0].shutdown()
    with ActorPool(resolver, "calc", resolve_timeout=5) as pool:
        served = Counter(pool.who() for _ in range(12))
    assert set(served) == {"replica-1", "replica-2"}


def test_actor_pool_without_endpoints_raises_not_found() -> None:
    pool = ActorPool(FixedResolver({}), "calc", resolve_timeout=0.1)
    with pytest.raises(ActorNotFoundError, match="no actor 'calc' in namespace 'fixed'; known: none"):
        pool.broadcast("who")


# ---------------------------------------------------------------- pure helpers


def test_parse_metadata_endpoints_reads_prefixed_keys_and_url_lists() -> None:
    attributes = {
        "iris_actor_inference": "http://10.0.0.5:9000, 10.0.0.6:9000",
        "iris_actor_store": "http://10.0.0.7:9100",
        "startup-script": "echo hi",
        "iris_actor_": "ignored",
    }
    assert parse_metadata_endpoints(attributes) == {
        "inference": ["http://10.0.0.5:9000", "http://10.0.0.6:9000"],
        "store": ["http://10.0.0.7:9100"],
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, ([], {})), ("[1, 2]", ([1, 2], {})), ('{"x": 1}', ([], {"x": 1})), ('"hi"', (["hi"], {}))],
)
def test_cli_call_arguments_json_maps_to_args_and_kwargs(text: str | None, expected: tuple) -> None:
    assert call_arguments(text) == expected
