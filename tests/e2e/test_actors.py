"""Actors end to end: the example actor job on a cluster of real controller and worker processes,
called from this process, from other jobs and from the CLI, across a worker's death."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import cloudpickle
import pytest

from iris.actor import ActorClient, ActorPool, ActorServer
from iris.client import IrisClient, Job, iris_ctx
from iris.client.resolver import ClusterResolver
from iris.cluster.types import Entrypoint, ResourceSpec
from iris.time import wait_until

# Callables defined here travel by value: the workers cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "actors"
SMALL = ResourceSpec(cpu=0.1, memory="128MB")
CALL_TIMEOUT_S = 60.0


def submit_inference(client: IrisClient, name: str, replicas: int = 1, max_task_failures: int = 0) -> Job:
    return client.submit(
        Entrypoint.from_command(sys.executable, "-m", "inference_server"),
        name=name,
        ports=["actor"],
        replicas=replicas,
        max_task_failures=max_task_failures,
        resources=SMALL,
        workspace=EXAMPLE_DIR,
    )


def predict_from_job(namespace: str, text: str) -> dict:
    """A second job calling the actor through the controller it was given."""
    resolver = ClusterResolver(iris_ctx().controller_address, namespace=namespace)
    return ActorClient(resolver, "inference", resolve_timeout=CALL_TIMEOUT_S).predict({"text": text})


class Counter1:
    def __init__(self) -> None:
        self.value = 0

    def bump(self) -> int:
        self.value += 1
        return self.value


def ask_parent_actor() -> int:
    """A child job: finds its parent's actor through iris_ctx().resolver (the root job's namespace)."""
    client = ActorClient(iris_ctx().resolver, "counter", resolve_timeout=CALL_TIMEOUT_S)
    return client.bump() + client.bump()


def host_actor_and_run_child() -> int:
    """A task hosting an actor on its named port while its child job calls it."""
    server = ActorServer(port="actor")
    server.register("counter", Counter1())
    server.start()
    try:
        with iris_ctx().client as client:
            child = client.submit(Entrypoint.from_callable(ask_parent_actor), name="asker", resources=SMALL)
            return child.result(timeout=CALL_TIMEOUT_S)
    finally:
        server.shutdown()


def iris_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_")}
    return subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.e2e
def test_actor_job_called_from_outside_another_job_and_cli(process_cluster) -> None:
    process_cluster.start_controller()
    process_cluster.start_worker("w0")
    url = process_cluster.url
    with IrisClient.remote(url) as client:
        job = submit_inference(client, "serve")
        resolver = ClusterResolver(url, namespace="serve")
        actor = ActorClient(resolver, "inference", resolve_timeout=CALL_TIMEOUT_S)
        assert actor.predict({"text": "one two three"}) == {"words": 3, "served_by": "/serve/0"}
        assert actor.embed("abc", dim=2) == [3.0, 6.0]
        with pytest.raises(KeyError, match="text") as raised:
            actor.predict({"txt": "typo"})
        assert "inference_server.py" in "\n".join(raised.value.__notes__)

        caller = client.submit(
            Entrypoint.from_callable(predict_from_job, "/serve", "from another job"),
            name="caller",
            resources=SMALL,
        )
        assert caller.result(timeout=CALL_TIMEOUT_S) == {"words": 3, "served_by": "/serve/0"}
        assert actor.stats() == {"requests": 2}

        listed = iris_cli("actor", "list", "--controller-url", url, "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = json.loads(listed.stdout)
        assert (row["name"], row["namespace"], row["job_id"], row["task_id"]) == (
            "inference",
            "/serve",
            "/serve",
            "/serve/0",
        )

        called = iris_cli(
            "actor", "call", "inference", "predict", "--json", '[{"text": "x y"}]', "--controller-url", url
        )
        assert called.returncode == 0, called.stderr
        assert json.loads(called.stdout) == {"words": 2, "served_by": "/serve/0"}

        missing = iris_cli("actor", "call", "nope", "stats", "--timeout", "0.5", "--controller-url", url)
        assert missing.returncode == 1
        assert (
            missing.stderr.splitlines()[0]
            == "error: no actor 'nope' in namespace '(every job)'; known: inference"
        )

        raising = iris_cli("actor", "call", "inference", "predict", "--json", "{}", "--controller-url", url)
        assert raising.returncode == 1
        assert (
            raising.stderr.splitlines()[0] == "Error: actor 'inference': predict raised TypeError: "
            "InferenceModel.predict() missing 1 required positional argument: 'request'"
        )

        job.terminate()
        job.wait(timeout=CALL_TIMEOUT_S, raise_on_failure=False)
        # The registry's visibility rule: a finished job's actors are gone.
        assert resolver.resolve("inference") == []


@pytest.mark.e2e
def test_actor_child_job_finds_parent_actor_through_iris_ctx(process_cluster) -> None:
    process_cluster.start_controller()
    process_cluster.start_worker("w0")
    with IrisClient.remote(process_cluster.url) as client:
        job = client.submit(
            Entrypoint.from_callable(host_actor_and_run_child),
            name="parent",
            ports=["actor"],
            resources=SMALL,
        )
        assert job.result(timeout=CALL_TIMEOUT_S) == 3


@pytest.mark.e2e
def test_actor_worker_killed_task_retried_next_call_reaches_new_endpoint(process_cluster) -> None:
    process_cluster.start_controller()
    process_cluster.start_worker("w0")
    process_cluster.wait_for_workers("w0")
    url = process_cluster.url
    with IrisClient.remote(url) as client:
        submit_inference(client, "failover")
        resolver = ClusterResolver(url, namespace="failover")
        actor = ActorClient(resolver, "inference", resolve_timeout=CALL_TIMEOUT_S)
        before = actor.whoami()
        assert (before["worker_id"], before["attempt_id"]) == ("w0", 0)
        process_cluster.start_worker("w1")
        process_cluster.wait_for_workers("w1")
        process_cluster.kill_worker("w0")

        after = actor.whoami()

        assert (after["worker_id"], after["attempt_id"]) == ("w1", 1)
        [endpoint] = resolver.resolve("inference")
        assert endpoint.metadata["iris.attempt_id"] == "1"
        assert actor.predict({"text": "still here"})["words"] == 2


@pytest.mark.e2e
def test_actor_pool_three_replicas_round_robin_broadcast_and_killed_replica(process_cluster) -> None:
    process_cluster.start_controller()
    process_cluster.start_worker("w0")
    url = process_cluster.url
    with IrisClient.remote(url) as client:
        # One replica may die without failing the job, so its endpoint stays listed.
        submit_inference(client, "pool", replicas=3, max_task_failures=1)
        pool = ActorPool(ClusterResolver(url, namespace="pool"), "inference", resolve_timeout=CALL_TIMEOUT_S)
        wait_until(
            lambda: len(pool.endpoints(refresh=True)) == 3, CALL_TIMEOUT_S, 0.1, "three replicas to register"
        )

        served = Counter(pool.predict({"text": "spread me"})["served_by"] for _ in range(30))
        assert served == {"/pool/0": 10, "/pool/1": 10, "/pool/2": 10}

        identities = pool.broadcast("whoami")
        assert sorted(r.value["task_id"] for r in identities) == ["/pool/0", "/pool/1", "/pool/2"]

        victim = next(r.value for r in identities if r.value["task_id"] == "/pool/1")
        os.kill(victim["pid"], signal.SIGKILL)
        results = pool.broadcast("whoami")
        pool.close()

    assert len(results) == 3
    failed = [r for r in results if not r.ok]
    assert len(failed) == 1
    assert failed[0].endpoint.metadata["iris.task_id"] == "/pool/1"
    assert sorted(r.value["task_id"] for r in results if r.ok) == ["/pool/0", "/pool/2"]
