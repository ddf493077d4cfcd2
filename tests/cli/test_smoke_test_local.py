"""scripts/smoke-test.py against the local platform: a healthy cluster passes every step and
leaves nothing running; a cluster whose workers cannot start fails fast, with the reason, and
leaves nothing either."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
from cli_support import write_local_config

REPO = Path(__file__).resolve().parents[2]
SMOKE_TEST = REPO / "scripts" / "smoke-test.py"
TIMEOUT_S = 240

GROUP_YAML = """\
  autoscaler:
    evaluation_interval: 0.5s
    scale_up_delay: 0s
scale_groups:
  cpu:
    min_slices: 0
    max_slices: 2
    resources: {cpu: 1, ram: 1GB}
    slice_template: {num_vms: 2, accelerator_type: cpu, local: {}}
"""


def run_smoke_test(config: Path, prefix: str, log_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SMOKE_TEST), "--config", str(config), "--prefix", prefix, "--job-timeout", "60", "--log-dir", str(log_dir)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        start_new_session=True,
    )


def processes_using(path: Path) -> list[str]:
    """Command lines of live processes that mention `path` (the run's controller and workers do)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            if str(path) in cmdline and process.status() != psutil.STATUS_ZOMBIE:
                found.append(cmdline)
        except psutil.Error:
            continue
    return found


def test_smoke_test_local_cluster_passes_every_step_and_leaves_nothing(tmp_path: Path) -> None:
    config, state_dir = write_local_config(tmp_path, "smoke-local", textwrap.dedent(GROUP_YAML))

    result = run_smoke_test(config, "smoke-ok", tmp_path / "logs")

    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    for step in ("build images", "start cluster", "simple job", "concurrent jobs", "coscheduled job", "accelerator job", "cleanup"):
        assert f"PASS  {step} " in result.stdout, result.stdout
    assert "accelerator=cpu" in result.stdout and "result=85344.0" in result.stdout
    assert "2 tasks placed together on smoke-ok-cpu-" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("smoke test passed: 7 steps")
    # --prefix gave the run a state directory (and labels) of its own.
    assert (state_dir / "smoke-ok" / "platform").is_dir()
    assert not processes_using(state_dir)
    assert not list((state_dir / "smoke-ok" / "platform" / "slices").iterdir())


def test_smoke_test_broken_worker_fails_fast_with_the_reason_and_leaves_nothing(tmp_path: Path) -> None:
    # A worker command that cannot even start Python: every slice of the group fails at once.
    broken = GROUP_YAML.replace("  autoscaler:", "  bootstrap:\n    env_vars: {PYTHONHOME: /nonexistent-python-home}\n  autoscaler:")
    config, state_dir = write_local_config(tmp_path, "smoke-broken", textwrap.dedent(broken))
    log_dir = tmp_path / "logs"

    result = run_smoke_test(config, "smoke-broken", log_dir)

    assert result.returncode == 1, f"{result.stdout}\n{result.stderr}"
    summary = result.stdout.split("smoke test FAILED", 1)[1].splitlines()[1:]
    assert [line.split(":")[0].strip() for line in summary] == ["simple job", "concurrent jobs", "coscheduled job", "accelerator job"]
    for line in summary:
        assert "of cpu failed: worker process(es)" in line and "ModuleNotFoundError: No module named 'encodings'" in line, line
    assert "PASS  collect logs" in result.stdout and "PASS  cleanup" in result.stdout, result.stdout
    assert (log_dir / "autoscaler.json").exists() and (log_dir / "controller-smoke-broken-controller.log").exists()
    assert not processes_using(state_dir)
    platform_dir = state_dir / "smoke-broken" / "platform"
    assert not list((platform_dir / "slices").iterdir()) and not list((platform_dir / "vms").iterdir())


def test_smoke_test_prefix_gives_a_coreweave_cluster_a_namespace_of_its_own() -> None:
    spec = importlib.util.spec_from_file_location("smoke_test", SMOKE_TEST)
    assert spec is not None and spec.loader is not None
    smoke_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke_test)

    first = smoke_test.isolated_config(str(REPO / "examples" / "coreweave.yaml"), "smoke-a")
    second = smoke_test.isolated_config(str(REPO / "examples" / "coreweave.yaml"), "smoke-b")

    assert (first.platform.coreweave.namespace, second.platform.coreweave.namespace) == ("smoke-a", "smoke-b")
    assert (first.platform.label_prefix, second.platform.label_prefix) == ("smoke-a", "smoke-b")
