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
