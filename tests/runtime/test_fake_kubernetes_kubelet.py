"""The fake cluster's kubelet, driven by kubectl and the Python client: Pods really run on the
private dockerd, and what kubectl shows about them (logs, exec, port-forward, describe, top) comes
from there."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from engines import DockerEngine
from fakes.kubernetes.cluster import FakeKubernetes
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.stream import portforward, stream

from iris.time import wait_until


@pytest.fixture
def core(kubernetes_cluster: FakeKubernetes) -> Iterator[Any]:
    api_client = config.new_client_from_config(config_file=str(kubernetes_cluster.kubeconfig))
    yield k8s.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def namespace(kubernetes_cluster: FakeKubernetes, core: Any) -> Iterator[str]:
    """A namespace per test; deleting it stops and removes the test's Pods."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _pod(name: str, image: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": image, "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }


def _apply(cluster: FakeKubernetes, namespace: str, manifest: dict[str, Any]) -> None:
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    assert result.returncode == 0, result.stderr


def _phase(core: Any, namespace: str, name: str) -> str:
    return core.read_namespaced_pod(name, namespace).status.phase


def _main_state(core: Any, namespace: str, name: str) -> Any:
    statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
    return statuses[0] if statuses else None


def test_pod_runs_env_volumes_and_init_container_then_kubectl_logs_and_describe(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"color": "blue"}}
    )
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}}
    )
    manifest = _pod(
        "full",
        docker_engine.base_image,
        'echo "$POD_NAME $COLOR $TOKEN $(cat /shared/from-init) $(cat /config/color)"; echo to-stderr >&2',
        restartPolicy="Never",
        initContainers=[
            {
                "name": "prepare",
                "image": docker_engine.base_image,
                "command": ["sh", "-c", "echo prepared > /shared/from-init"],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
            }
        ],
        volumes=[{"name": "shared", "emptyDir": {}}, {"name": "config", "configMap": {"name": "settings"}}],
        container={
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            ],
            "volumeMounts": [
                {"name": "shared", "mountPath": "/shared"},
                {"name": "config", "mountPath": "/config"},
            ],
        },
    )
    _apply(kubernetes_cluster, namespace, manifest)

    wait_until(lambda: _phase(core, namespace, "full") == "Succeeded", 60, 0.1, "the pod to succeed")
    logs = kubernetes_cluster.kubectl("logs", "-n", namespace, "full")
    stdout_only = core.read_namespaced_pod_log("full", namespace, stream="Stdout")
    describe = kubernetes_cluster.kubectl("describe", "pod", "-n", namespace, "full")

    # Both streams, in whichever order the two pipes delivered them.
    assert sorted(logs.stdout.splitlines()) == ["full blue s3cret prepared blue", "to-stderr"]
    assert stdout_only.splitlines() == ["full blue s3cret prepared blue"]
    assert "Reason:       Completed" in describe.stdout
    assert "Created container main" in describe.stdout and "Started container main" in describe.stdout


def test_kubectl_exec_runs_in_the_container_with_stdin_and_exit_code(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    _apply(kubernetes_cluster, namespace, _pod("sleeper", docker_engine.base_image, "sleep 600"))
    ready = kubernetes_cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Ready", "pod/sleeper", "--timeout=60s"
    )
    assert ready.returncode == 0, ready.stderr

    failing = kubernetes_cluster.kubectl(
        "exec", "-n", namespace, "sleeper", "--", "sh", "-c", "echo out; echo err >&2; exit 3"
    )
    piped = kubernetes_cluster.kubectl(
        "exec", "-i", "-n", namespace, "sleeper", "--", "cat", input="through stdin\n"
    )
    from_python = stream(
        core.connect_get_namespaced_pod_exec,
        "sleeper",
        namespace,
        command=["sh", "-c", "echo $HOSTNAME-ok"],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
    )

    assert (failing.returncode, failing.stdout) == (3, "out\n")
    assert "err" in failing.stderr and "exit code 3" in failing.stderr
    assert piped.stdout == "through stdin\n"
    assert from_python.strip().endswith("-ok")


def test_kubectl_top_pod_reports_metrics_of_a_running_pod(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    script = "python3 -c 'data = b\"x\" * 80_000_000; import time; time.sleep(600)'"
    _apply(kubernetes_cluster, namespace, _pod("hungry", docker_engine.base_image, script))
    wait_until(lambda: _phase(core, namespace, "hungry") == "Running", 60, 0.1, "running")

    def memory_mib() -> int | None:
        result = kubernetes_cluster.kubectl("top", "pod", "-n", namespace, "hungry", "--no-headers")
        if result.returncode != 0:
            return None
        mib = int(result.stdout.split()[2].removesuffix("Mi"))
        return mib if mib >= 70 else None

    assert wait_until(memory_mib, 30, 0.2, "80MB in kubectl top") < 1024


def test_crashing_container_goes_to_crash_loop_back_off_and_keeps_previous_logs(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    _apply(kubernetes_cluster, namespace, _pod("crasher", docker_engine.base_image, "echo attempt; exit 1"))

    def backing_off() -> Any:
        state = _main_state(core, namespace, "crasher")
        waiting = state.state.waiting if state else None
        return (
            state if waiting and waiting.reason == "CrashLoopBackOff" and state.restart_count >= 2 else None
        )

    state = wait_until(backing_off, 60, 0.1, "CrashLoopBackOff after two restarts")
    previous = kubernetes_cluster.kubectl("logs", "-n", namespace, "crasher", "--previous")

    assert state.last_state.terminated.exit_code == 1
    assert previous.stdout == "attempt\n"
    assert "CrashLoopBackOff" in kubernetes_cluster.kubectl("get", "pod", "-n", namespace, "crasher").stdout


def test_missing_image_secret_and_config_map_are_reported_like_a_kubelet(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    base = docker_engine.base_image
    _apply(kubernetes_cluster, namespace, _pod("no-image", "iris-test/not-there:1", "true"))
    _apply(
        kubernetes_cluster,
        namespace,
        _pod(
            "no-secret",
            base,
            "true",
            container={"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]},
        ),
    )
    _apply(
        kubernetes_cluster,
        namespace,
        _pod(
            "no-config",
            base,
            "true",
            restartPolicy="Never",
            volumes=[{"name": "c", "configMap": {"name": "absent"}}],
            container={"volumeMounts": [{"name": "c", "mountPath": "/c"}]},
        ),
    )

    def waiting_reason(name: str, wanted: str) -> str | None:
        state = _main_state(core, namespace, name)
        waiting = state.state.waiting if state else None
        return waiting.message if waiting and waiting.reason == wanted else None

    assert "not found" in wait_until(
        lambda: waiting_reason("no-image", "ErrImagePull"), 30, 0.1, "ErrImagePull"
    )
    wait_until(lambda: waiting_reason("no-image", "ImagePullBackOff"), 30, 0.1, "ImagePullBackOff")
    assert (
        wait_until(
            lambda: waiting_reason("no-secret", "CreateContainerConfigError"),
            30,
            0.1,
            "CreateContainerConfigError",
        )
        == 'secret "absent" not found'
    )

    def failed_mounts() -> int | None:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=no-config").items
        counts = [e.count for e in events if e.reason == "FailedMount"]
        return counts[0] if counts and counts[0] >= 2 else None

    wait_until(failed_mounts, 30, 0.1, "repeated FailedMount events")
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "absent"}, "data": {"a": "b"}})
    wait_until(
        lambda: _phase(core, namespace, "no-config") == "Succeeded", 30, 0.1, "the pod to run once mounted"
    )


def test_injected_image_pull_failure_reports_the_given_reason(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    image = f"{docker_engine.base_image.split(':')[0]}:{docker_engine.base_image.split(':')[1]}"
    tagged = f"iris-test/injected:{uuid.uuid4().hex[:6]}"
    kubernetes_cluster.fail_image_pull(tagged, "manifest unknown: injected by the test")
    _apply(kubernetes_cluster, namespace, _pod("injected", tagged, "true"))

    def message() -> str | None:
        state = _main_state(core, namespace, "injected")
        waiting = state.state.waiting if state else None
        return waiting.message if waiting and waiting.reason == "ErrImagePull" else None

    assert wait_until(message, 30, 0.1, "ErrImagePull") == "manifest unknown: injected by the test"
    assert image == docker_engine.base_image


def test_delete_pod_stops_container_with_sigterm_and_reports_how_it_ended(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    script = "trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.1; done"
    _apply(kubernetes_cluster, namespace, _pod("graceful", docker_engine.base_image, script))
    wait_until(lambda: _phase(core, namespace, "graceful") == "Running", 60, 0.1, "running")
    wait_until(lambda: "ready" in core.read_namespaced_pod_log("graceful", namespace), 60, 0.1, "ready")
    from kubernetes import watch

    listed = core.list_namespaced_pod(namespace, field_selector="metadata.name=graceful")
    core.delete_namespaced_pod("graceful", namespace, grace_period_seconds=10)
    final = None
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        namespace,
        field_selector="metadata.name=graceful",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=30,
    ):
        if event["type"] == "DELETED":
            final = event["object"]
            break

    assert final is not None, "the pod was not deleted"
    assert final.status.container_statuses[0].state.terminated.exit_code == 0


def test_deployment_rolls_out_running_pods(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "server"}},
            "template": {
                "metadata": {"labels": {"app": "server"}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": docker_engine.base_image, "command": ["sleep", "600"]}
                    ]
                },
            },
        },
    }
    _apply(kubernetes_cluster, namespace, deployment)

    rollout = kubernetes_cluster.kubectl(
        "rollout", "status", "-n", namespace, "deployment/server", "--timeout=60s"
    )

    assert rollout.returncode == 0, rollout.stderr
    pods = core.list_namespaced_pod(namespace, label_selector="app=server").items
    assert [p.status.phase for p in pods] == ["Running", "Running"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ECHO_SERVER = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
while True:
    connection, _ = server.accept()
    connection.sendall(b"echo:" + connection.recv(100))
    connection.close()
"""


def test_port_forward_reaches_the_pod_from_kubectl_and_the_python_client(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    port = _free_port()
    manifest = _pod("echo", docker_engine.base_image, "")
    manifest["spec"]["containers"][0]["command"] = ["python3", "-c", ECHO_SERVER, str(port)]
    _apply(kubernetes_cluster, namespace, manifest)
    ready = kubernetes_cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Ready", "pod/echo", "--timeout=60s"
    )
    assert ready.returncode == 0, ready.stderr

    def listening() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, 30, 0.05, "the echo server")
    forwarded = portforward(core.connect_get_namespaced_pod_portforward, "echo", namespace, ports=str(port))
    from_python = forwarded.socket(port)
    from_python.setblocking(True)
    from_python.sendall(b"python")
    python_reply = from_python.recv(100)
    from_python.close()
    kubectl = subprocess.Popen(
        ["kubectl", "port-forward", "-n", namespace, "pod/echo", f":{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubernetes_cluster.env(),
    )
    try:
        announced = kubectl.stdout.readline() if kubectl.stdout else ""
        match = re.search(r"127\.0\.0\.1:(\d+) -> ", announced)
        assert match, f"kubectl port-forward said {announced!r}"
        replies = []
        for attempt in (b"first", b"second"):
            with socket.create_connection(("127.0.0.1", int(match.group(1))), timeout=10) as connection:
                connection.sendall(attempt)
                replies.append(connection.recv(100))
    finally:
        kubectl.kill()
        kubectl.wait()

    assert python_reply == b"echo:python"
    assert replies == [b"echo:first", b"echo:second"]


def test_readiness_probe_holds_ready_until_the_port_answers(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    port = _free_port()
    manifest = _pod(
        "slow-start", docker_engine.base_image, f"echo started; sleep 2; exec python3 -m http.server {port}"
    )
    manifest["spec"]["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/", "port": port},
        "periodSeconds": 1,
    }
    _apply(kubernetes_cluster, namespace, manifest)
    wait_until(lambda: _phase(core, namespace, "slow-start") == "Running", 60, 0.1, "running")
    not_ready_yet = _main_state(core, namespace, "slow-start").ready

    ready = kubernetes_cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Ready", "pod/slow-start", "--timeout=60s"
    )

    assert not_ready_yet is False
    assert ready.returncode == 0, ready.stderr
    assert _main_state(core, namespace, "slow-start").ready is True


def test_liveness_probe_failures_restart_the_container_and_are_recorded_as_events(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, docker_engine: DockerEngine
) -> None:
    image = docker_engine.base_image
    served, unserved = _free_port(), _free_port()
    quick = {"periodSeconds": 1, "failureThreshold": 2}
    manifest = _pod(
        "liveness",
        image,
        "touch /tmp/healthy; sleep 1; rm /tmp/healthy; exec sleep 600",
        container={"livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]}, **quick}},
        terminationGracePeriodSeconds=1,
    )
    manifest["spec"]["containers"] += [
        {
            "name": "closed-port",
            "image": image,
            "command": ["sleep", "600"],
            "livenessProbe": {"tcpSocket": {"port": unserved}, **quick},
        },
        {
            "name": "healthy",
            "image": image,
            "command": ["python3", "-m", "http.server", str(served)],
            "livenessProbe": {"httpGet": {"path": "/", "port": served}, "initialDelaySeconds": 1, **quick},
        },
    ]
    _apply(kubernetes_cluster, namespace, manifest)

    def statuses() -> dict[str, Any]:
        result = kubernetes_cluster.kubectl("get", "pod", "liveness", "-n", namespace, "-o", "json")
        assert result.returncode == 0, result.stderr
        return {s["name"]: s for s in json.loads(result.stdout)["status"].get("containerStatuses") or []}

    wait_until(
        lambda: all(statuses().get(name, {}).get("restartCount", 0) >= 1 for name in ("main", "closed-port")),
        60,
        0.2,
        "both failing containers restarted",
    )
    final = statuses()
    events = kubernetes_cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=liveness", "-o", "json"
    )
    messages = [e["message"] for e in json.loads(events.stdout)["items"]]

    assert "terminated" in final["main"]["lastState"]
    assert final["healthy"]["restartCount"] == 0
    assert "Liveness probe failed for container closed-port" in messages
    assert "Container main failed liveness probe, will be restarted" in messages
