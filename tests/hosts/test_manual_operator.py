"""The operator's tools on a manual cluster over the namespace hosts: scripts/smoke-test.py passes
from the config alone, and `iris cluster debug` reads the controller's and workers' logs through
SSH and cleans up exactly what its dry run lists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from netns import SshHost
from test_manual_platform import GROUP, cluster_config

from iris.config import config_to_dict
from iris.rpc import config_pb2
from iris.time import wait_until

REPO = Path(__file__).resolve().parents[2]
IRIS = [sys.executable, "-m", "iris.cli.main"]
CONTROLLER_PORT = 10000
TIMEOUT_S = 240


def _write(config: config_pb2.IrisClusterConfig, controller: SshHost, path: Path) -> Path:
    config.controller.manual.host = controller.address
    config.controller.manual.port = CONTROLLER_PORT
    config.defaults.autoscaler.evaluation_interval.milliseconds = 500
    config.defaults.autoscaler.scale_up_delay.milliseconds = 0
    path.write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
    return path


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(cwd)}
    env.pop("IRIS_CONTROLLER_URL", None)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def _iris_ok(config: Path, *args: str) -> str:
    result = _run([*IRIS, "cluster", "--config", str(config), *args], config.parent)
    assert result.returncode == 0, f"iris cluster {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_smoke_test_manual_hosts_passes_every_step_and_leaves_the_hosts_clean(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    controller, gang = hosts[0], hosts[1:3]
    config = cluster_config([h.address for h in gang], ssh_key, "", tmp_path / "bundles", num_vms=2)
    path = _write(config, controller, tmp_path / "manual.yaml")

    result = _run(
        [sys.executable, str(REPO / "scripts" / "smoke-test.py"), "--config", str(path), "--prefix", "smoke-manual",
         "--job-timeout", "90", "--log-dir", str(tmp_path / "logs")],
        tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "(manual platform)" in result.stdout
    for step in ("start cluster", "simple job", "concurrent jobs", "coscheduled job", "accelerator job", "cleanup"):
        assert f"PASS  {step} " in result.stdout, result.stdout
    assert "2 tasks placed together on smoke-manual-cpu-" in result.stdout
    assert not any(host.processes() for host in hosts)


def test_manual_debug_reads_logs_over_ssh_and_cleanup_deletes_what_its_dry_run_lists(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    controller, worker_host = hosts[0], hosts[1]
    config = cluster_config([worker_host.address], ssh_key, "", tmp_path / "bundles")
    config.scale_groups[GROUP].min_slices = 1
    path = _write(config, controller, tmp_path / "manual.yaml")
    try:
        _iris_ok(path, "start")
        discovered = _iris_ok(path, "debug", "discover")
        assert f"address  {controller.address}" in discovered
        assert f"url      http://{controller.address}:{CONTROLLER_PORT}" in discovered
        assert "is healthy on port" in _iris_ok(path, "debug", "bootstrap-logs")
        assert _iris_ok(path, "debug", "logs", "--tail", "5").strip()
        [worker] = [line.split()[0] for line in _iris_ok(path, "debug", "list-workers").splitlines()[1:] if "healthy" in line]
        assert "is healthy on port" in _iris_ok(path, "debug", "bootstrap-logs", worker)

        dry = _iris_ok(path, "debug", "cleanup")
        listed = [line for line in dry.splitlines() if line.startswith(("vm ", "slice "))]
        assert [line.split()[0] for line in listed] == ["vm", "slice"], dry
        assert any(host.processes() for host in (controller, worker_host)), "a dry run must not stop anything"

        deleted = _iris_ok(path, "debug", "cleanup", "--no-dry-run")
        assert [line for line in deleted.splitlines() if line.startswith(("vm ", "slice "))] == listed
        assert deleted.strip().endswith("deleted 1 VM(s) and 1 slice(s)")
        wait_until(lambda: not any(host.processes() for host in hosts), 20, 0.2, "the hosts to run nothing of Iris")
        assert _iris_ok(path, "debug", "cleanup").strip() == "nothing of cluster 'manual-test' found"
    finally:
        _run([*IRIS, "cluster", "--config", str(path), "stop", "--yes"], tmp_path)
