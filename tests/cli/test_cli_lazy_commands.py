"""`iris run` starts fast: the other subcommands' modules are imported only when named."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from iris.cli.app import iris
try:
    iris([{args}], prog_name="iris", standalone_mode=False)
except SystemExit:
    pass
print(",".join(sorted(m for m in ("iris.cli.actor", "iris.cli.build", "iris.cli.cluster", "iris.cli.job") if m in sys.modules)))
"""


def _modules_loaded_by(*args: str) -> str:
    code = PROBE.format(args=", ".join(repr(a) for a in args))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return result.stdout.strip().splitlines()[-1]


def test_cli_run_help_imports_only_the_job_commands() -> None:
    assert _modules_loaded_by("run", "--help") == "iris.cli.job"


def test_cli_cluster_help_loads_its_module_and_keeps_config_and_traceback_options() -> None:
    code = PROBE.format(args="'cluster', 'stop', '--help'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)

    assert "--config" in result.stdout and "--traceback" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "iris.cli.cluster"


# What `iris run` must not import to start: the cloud platforms and their clients, the table
# renderer, YAML, fsspec. `--local` adds the controller and the local platform, nothing more.
NEVER_ON_THE_RUN_PATH = (
    "httpx",
    "rich",
    "fsspec",
    "kubernetes",
    "iris.cluster.platform.gcp",
    "iris.cluster.platform.coreweave",
    "iris.cluster.platform.manual",
    "iris.cluster.runtime.kubernetes",
)
RUN_PATH_PROBE = """
import sys
from iris.cli.app import iris
try:
    iris(["run", "--help"], prog_name="iris", standalone_mode=False)
except SystemExit:
    pass
remote = set(sys.modules)
import iris.cluster.local_cluster, iris.cluster.controller.main
local = set(sys.modules)
never = {never!r}
print(",".join(sorted(m for m in remote if m.startswith(never + ("iris.cluster.controller", "yaml")))))
print(",".join(sorted(m for m in local if m.startswith(never))))
"""


def test_cli_run_import_path_leaves_out_platforms_renderer_and_controller() -> None:
    code = RUN_PATH_PROBE.format(never=NEVER_ON_THE_RUN_PATH)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    remote_extra, local_extra = result.stdout.splitlines()[-2:]

    assert remote_extra == "", f"`iris run` imports {remote_extra}"
    assert local_extra == "", f"`iris run --local` imports {local_extra} before it starts the controller"


# The entry point with the fork replaced by a record of what was imported when it happened.
FORK_POINT_PROBE = """
import sys
import iris.cluster.local_cluster_process as cluster_process
from iris.cli import main

imported_at_fork = []
cluster_process.fork_cluster = lambda verbose, configure: imported_at_fork.extend(sys.modules)
sys.argv = ["iris", "run", "--local", "--", "true"]
try:
    main.main()
except SystemExit:
    pass
late = ("iris.cli.app", "iris.cli.job", "iris.client", "iris.cluster.controller", "starlette", "uvicorn")
print(len(imported_at_fork) > 0, ",".join(sorted(m for m in imported_at_fork if m.startswith(late))))
"""


def test_cli_run_local_forks_its_cluster_before_importing_commands_or_controller() -> None:
    """The cluster's process imports and builds the controller while the CLI imports its commands:
    a fork after either import would put it back on the way to the job's first line."""
    result = subprocess.run(
        [sys.executable, "-c", FORK_POINT_PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    forked, _, imported_early = result.stdout.splitlines()[-1].partition(" ")

    assert forked == "True", result.stdout + result.stderr
    assert imported_early == "", f"imported before the fork: {imported_early}"
