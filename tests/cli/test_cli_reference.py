"""Every command of the README's CLI reference, called for real against one local cluster.

(`controller run-local` is the command every local `start`, `restart` and `reload` here runs in
the background; its foreground behaviour is tested in test_cli_run_local.py.)

One test walks the reference in an order that keeps a single cluster useful throughout (the
controller is stopped, started, restarted and reloaded under it), so the whole reference costs one
cluster's start-up rather than one per command.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
from pathlib import Path

import psutil
from cli_support import (
    IrisResult,
    IrisRunner,
    closed_port,
    is_alive,
    process_tree,
    send_ctrl_c,
    write_local_config,
)

from iris.time import wait_until

GROUP = "cpu"
CLUSTER_YAML = """\
  autoscaler:
    evaluation_interval: 0.5s
    scale_up_delay: 0s
scale_groups:
  cpu:
    min_slices: 1
    max_slices: 3
    resources: {cpu: 1, ram: 1GB}
    slice_template: {num_vms: 2, accelerator_type: cpu, local: {}}
"""


class Cluster:
    """`iris cluster --config F ARGS` and friends on the test's cluster."""

    def __init__(self, runner: IrisRunner, path: Path, state_dir: Path) -> None:
        self.runner, self.path, self.state_dir = runner, path, state_dir

    def __call__(self, *args: str, ok: bool = True, **kwargs) -> IrisResult:
        result = self.runner("cluster", f"--config={self.path}", *args, **kwargs)
        if ok:
            assert result.returncode == 0, str(result)
        return result

    def url(self) -> str:
        return (self.state_dir / "controller.url").read_text().strip()

    def pid(self) -> int:
        return int((self.state_dir / "cluster.pid").read_text().strip())

    def slices(self) -> list[dict]:
        return json.loads(self("slice", "list", "--json").stdout)

    def workers(self) -> list[str]:
        return sorted(w["workerId"] for w in json.loads(self("vm", "status", "--json").stdout) if w["state"] == "WORKER_STATE_HEALTHY")


def _controller_section(cluster: Cluster) -> None:
    status = cluster("controller", "status")
    assert "http://127.0.0.1:" in status.stdout and status.stdout.rstrip().endswith("healthy"), str(status)
    workers = cluster.workers()

    stopped = cluster("controller", "stop")
    assert stopped.stdout.strip() == "the controller of 'cli-reference' stopped; its slices keep running"
    down = cluster("controller", "status", ok=False)
    assert down.returncode == 1 and "is not running" in down.stdout, str(down)

    started = cluster("controller", "start")
    assert f"{len(workers)} worker(s)" in started.stdout, str(started)
    # The new controller adopted the slices that kept running: the same workers, none started anew.
    assert cluster.workers() == workers

    restarted = cluster("controller", "restart")
    assert f"running: controller {cluster.url()}, {len(workers)} worker(s)" in restarted.stdout, str(restarted)
    again = cluster("restart")
    assert f"running: controller {cluster.url()}, {len(workers)} worker(s)" in again.stdout, str(again)
    assert cluster.workers() == workers


def _slice_section(cluster: Cluster) -> None:
    created = cluster("slice", "create", "--scale-group", GROUP)
    new_id = re.search(r"created (\S+) in cpu", created.stdout).group(1)
    wait_until(lambda: any(s["sliceId"] == new_id and s["state"] == "READY" for s in cluster.slices()), 60, 0.3, "the new slice")
    listed = cluster("slice", "list")
    assert new_id in listed.stdout
    got = cluster("slice", "get", new_id)
    assert got.stdout.startswith(f"{new_id}  cpu  ready"), str(got)
    ended = cluster("slice", "terminate", new_id)
    assert ended.stdout.strip() == f"terminated {new_id}"


def _vm_section(cluster: Cluster) -> str:
    worker = cluster.workers()[0]
    status = cluster("vm", "status")
    assert worker in status.stdout
    by_url = cluster.runner("cluster", "vm", f"--controller-url={cluster.url()}", "status")
    assert by_url.returncode == 0 and worker in by_url.stdout, str(by_url)
    logs = cluster("vm", "logs", worker)
    assert logs.stdout.strip(), str(logs)
    got = cluster("vm", "get", worker)
    assert worker in got.stdout and "healthy" in got.stdout and "scale-group: cpu" in got.stdout, str(got)
    return worker


def _build_section(runner: IrisRunner) -> None:
    # Where the image would go is settled before a build of minutes: a GCP push needs a project.
    for kind, tag in (("worker-image", "iris-worker:v1"), ("controller-image", "iris-controller:v1")):
        result = runner("build", kind, "-t", tag, "--push", "--region", "us-central1", env={"CLOUDSDK_CORE_PROJECT": "", "GOOGLE_CLOUD_PROJECT": ""})
        assert result.returncode == 2 and "--registry gcp needs the GCP project" in result.stderr, str(result)
    unpushed = runner("build", "worker-image", "--region", "us-central1")
    assert unpushed.returncode == 2 and "add --push" in unpushed.stderr, str(unpushed)


def _debug_section(cluster: Cluster, worker: str) -> None:
    discovered = cluster("debug", "discover")
    assert "vm       iris-controller" in discovered.stdout and f"url      {cluster.url()}" in discovered.stdout
    health = cluster("debug", "health")
    assert health.stdout.startswith(f"controller {cluster.url()}: healthy"), str(health)
    assert "problem" not in health.stdout
    autoscaler = cluster("debug", "autoscaler-status")
    assert "scale group cpu: " in autoscaler.stdout, str(autoscaler)
    assert worker in cluster("debug", "list-workers").stdout
    assert "/cli-hello" in cluster("debug", "list-jobs").stdout
    shown = cluster("debug", "show-task-logs", "/cli-hello")
    assert "[0] hello from the cluster" in shown.stdout and "task /cli-hello/0: succeeded on" in shown.stdout, str(shown)
    bootstrap = cluster("debug", "bootstrap-logs")
    assert "iris: cluster 'cli-reference' ready at" in bootstrap.stdout, str(bootstrap)
    assert cluster("debug", "bootstrap-logs", worker).stdout.strip(), "a worker's startup log"

    follow = cluster.runner.popen("cluster", f"--config={cluster.path}", "debug", "logs", "--follow", "--tail", "1")
    try:
        printed: list[str] = []
        threading.Thread(target=lambda: printed.extend(follow.stdout), daemon=True).start()
        wait_until(lambda: printed, 30, 0.05, "the log's last line")
        # Following: a line the controller writes from now on shows up.
        with open(cluster.state_dir / "platform" / "iris-controller.log", "a") as log:
            log.write("a line written while following\n")
        wait_until(lambda: "a line written while following\n" in printed, 30, 0.05, "the new line")
        send_ctrl_c(follow)
        follow.wait(20)
        assert follow.returncode == 130
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()

    validated = cluster("debug", "validate", "--job-timeout", "60")
    for step in ("simple job", "concurrent jobs", "coscheduled job", "accelerator job"):
        assert f"PASS  {step}" in validated.stdout, str(validated)
    assert validated.stdout.rstrip().endswith("4 of 4 passed")


def _job_section(cluster: Cluster, workdir: Path) -> None:
    ran = cluster.runner("run", f"--config={cluster.path}", "--name", "cli-hello", "--", "python", "-c", "print('hello from the cluster')")
    assert ran.returncode == 0 and ran.stdout.splitlines() == ["hello from the cluster"], str(ran)
    # No group of this cluster offers a TPU: the controller refuses the job, saying why.
    tpu = cluster.runner(
        "run", f"--config={cluster.path}", "--tpu", "v5litepod-16", "-e", "WANDB_API_KEY", "--no-wait",
        "--", "python", "train.py", env={"WANDB_API_KEY": "secret"},
    )  # fmt: skip
    assert tpu.returncode == 1 and "no scale group or worker of this cluster can ever run it" in tpu.stderr, str(tpu)
    waiting = cluster.runner("run", f"--config={cluster.path}", "--no-wait", "--name", "long-job", "--", "sleep", "600")
    assert waiting.returncode == 0, str(waiting)
    assert waiting.stdout.strip() == "/long-job", str(waiting)
    killed = cluster.runner("job", "kill", f"--config={cluster.path}", "/long-job")
    assert killed.returncode == 0, str(killed)
    (workdir / "script.py").write_text("def main():\n    print('main ran on the cluster')\n")
    submitted = cluster.runner("submit", "script.py", "--config", str(cluster.path))
    assert submitted.returncode == 0 and "main ran on the cluster" in submitted.stdout, str(submitted)


def _cleanup_section(cluster: Cluster) -> None:
    tree = process_tree(cluster.pid())
    dry = cluster("debug", "cleanup")
    listed = [line for line in dry.stdout.splitlines() if line.startswith(("vm ", "slice "))]
    assert any(line.startswith("vm     iris-controller") for line in listed), str(dry)
    assert any(line.startswith("slice  iris-cpu-") for line in listed), str(dry)
    assert all(is_alive(p) for p in tree), "a dry run must not stop anything"

    deleted = cluster("debug", "cleanup", "--no-dry-run")
    assert [line for line in deleted.stdout.splitlines() if line.startswith(("vm ", "slice "))] == listed
    assert deleted.stdout.strip().endswith(f"deleted 1 VM(s) and {len(listed) - 1} slice(s)"), str(deleted)
    wait_until(lambda: not any(is_alive(p) for p in tree), 20, 0.1, "the cluster's processes to exit")
    assert cluster("debug", "cleanup").stdout.strip() == "nothing of cluster 'cli-reference' found"


def test_cli_reference_every_command_runs_against_one_local_cluster(iris: IrisRunner, tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    directory.mkdir()
    path, state_dir = write_local_config(directory, "cli-reference", textwrap.dedent(CLUSTER_YAML))
    cluster = Cluster(iris, path, state_dir)
    try:
        started = cluster("start")
        assert "running: controller http://127.0.0.1:" in started.stdout and "2 worker(s)" in started.stdout, str(started)
        assert cluster("status").stdout.startswith("cluster cli-reference  controller http://127.0.0.1:")

        _slice_section(cluster)
        worker = _vm_section(cluster)
        _job_section(cluster, iris.cwd)
        _debug_section(cluster, worker)
        _build_section(iris)
        _controller_section(cluster)

        dashboard = cluster("dashboard")
        assert dashboard.stdout.strip() == f"dashboard of 'cli-reference': {cluster.url()}/"
        port = closed_port()
        assert cluster("dashboard", "--port", str(port)).stdout.startswith("dashboard of 'cli-reference': http://")

        old_workers = cluster.workers()
        reloaded = cluster("reload", "--yes")
        assert "the config names no images" in reloaded.stdout and "2 worker(s)" in reloaded.stdout, str(reloaded)
        # Reload restarts the workers with this checkout's code: new daemons on the capacity.
        assert cluster.workers() != old_workers and len(cluster.workers()) == 2

        _cleanup_section(cluster)
        # Cleanup left nothing for stop to end (stopping a running cluster: test_cli_cluster_lifecycle.py).
        assert cluster("stop", "--yes").stdout.strip() == "cluster 'cli-reference' was not running"
    finally:
        if (state_dir / "cluster.pid").exists():
            tree = process_tree(cluster.pid())
            iris("cluster", f"--config={path}", "stop", "--yes")
            psutil.wait_procs(tree, timeout=20)
