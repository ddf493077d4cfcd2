"""Bad input: one clear error line and a non-zero exit, and a traceback only with --traceback."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cli_support import IrisRunner, closed_port


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


# ---------------------------------------------------------------- unreachable controller


@pytest.mark.parametrize(
    "command",
    [
        ("job", "list"),
        ("job", "status", "/some-job"),
        ("job", "logs", "/some-job"),
        ("job", "kill", "/some-job"),
        ("run",),
    ],
    ids=["job-list", "job-status", "job-logs", "job-kill", "run"],
)
def test_unreachable_controller_one_line_error_exit_1(iris: IrisRunner, command: tuple[str, ...]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    args = (*command, "--controller-url", url)
    if command == ("run",):
        args = (*args, "--", "true")

    result = iris(*args, timeout=60)

    assert result.returncode == 1, str(result)
    expected = f"error: cannot reach the Iris controller at {url}"
    assert first_line(result.stderr).startswith(expected), str(result)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_unreachable_controller_traceback_flag_shows_traceback(iris: IrisRunner) -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    result = iris("--traceback", "job", "list", "--controller-url", url, timeout=60)

    assert result.returncode != 0, str(result)
    assert "Traceback (most recent call last)" in result.stderr, str(result)
    assert f"cannot reach the Iris controller at {url}" in result.stderr


def test_unreachable_controller_from_env_var_one_line_error(iris: IrisRunner) -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    result = iris("job", "list", env={"IRIS_CONTROLLER_URL": url}, timeout=60)

    assert result.returncode == 1, str(result)
    expected = f"error: cannot reach the Iris controller at {url}"
    assert first_line(result.stderr).startswith(expected), str(result)


def test_job_list_without_cluster_asks_which_cluster_exit_2(iris: IrisRunner) -> None:
    result = iris("job", "list")

    assert result.returncode == 2, str(result)
    assert "which cluster?" in result.stderr, str(result)
    assert "IRIS_CONTROLLER_URL" in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- config files


def write_config(directory: Path, body: str) -> Path:
    path = directory / "typo.yaml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def typo_config(iris: IrisRunner, tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        f"""\
        name: typo
        platform:
          local: {{}}
        controller:
          local:
            port: 0
            stat_dir: {tmp_path / "state"}
        """,
    )


TYPO_MESSAGE = (
    "controller.local.stat_dir: unknown key 'stat_dir' in LocalControllerConfig; did you mean 'state_dir'?"
)


@pytest.mark.parametrize(
    "command",
    [
        ("cluster", "--config", "{config}", "start"),
        ("job", "list", "--config", "{config}"),
        ("run", "--config", "{config}", "--", "true"),
    ],
    ids=["cluster-start", "job-list", "run"],
)
def test_config_typo_key_names_key_path_and_suggests_fix(
    iris: IrisRunner, typo_config: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    args = [part.format(config=typo_config) for part in command]

    result = iris(*args)

    assert result.returncode == 1, str(result)
    assert first_line(result.stderr) == f"error: {typo_config}: {TYPO_MESSAGE}", str(result)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "state").exists(), "a bad config must not start anything"


def test_config_typo_nested_scale_group_key_suggests_fix(iris: IrisRunner, tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f"""\
        name: typo
        platform:
          local: {{}}
        controller:
          local:
            port: 0
            state_dir: {tmp_path / "state"}
        scale_groups:
          cpu:
            min_slice: 1
        """,
    )

    result = iris("cluster", "--config", str(config), "start")

    assert result.returncode == 1, str(result)
    assert "scale_groups.cpu.min_slice" in first_line(result.stderr), str(result)
    assert "did you mean 'min_slices'?" in first_line(result.stderr), str(result)


def test_config_typo_traceback_flag_shows_traceback(iris: IrisRunner, typo_config: Path) -> None:
    result = iris("--traceback", "job", "list", "--config", str(typo_config))

    assert result.returncode != 0, str(result)
    assert "Traceback (most recent call last)" in result.stderr, str(result)
    assert TYPO_MESSAGE in result.stderr


def test_config_missing_file_job_list_one_line_error(iris: IrisRunner, tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"

    result = iris("job", "list", "--config", str(missing))

    assert result.returncode == 1, str(result)
    assert first_line(result.stderr).startswith(f"error: {missing}: "), str(result)
    assert "No such file" in first_line(result.stderr)
    assert "Traceback" not in result.stderr


def test_config_missing_file_cluster_start_says_does_not_exist(iris: IrisRunner, tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"

    result = iris("cluster", "--config", str(missing), "start")

    assert result.returncode == 2, str(result)
    assert "does not exist" in result.stderr and str(missing) in result.stderr, str(result)
    assert "Traceback" not in result.stderr


def test_cluster_start_without_config_asks_for_it(iris: IrisRunner) -> None:
    result = iris("cluster", "start")

    assert result.returncode == 2, str(result)
    assert "--config" in result.stderr, str(result)
    assert "Traceback" not in result.stderr


def test_config_invalid_yaml_one_line_error(iris: IrisRunner, tmp_path: Path) -> None:
    config = write_config(tmp_path, "name: [unclosed\nplatform: {local: {}}\n")

    result = iris("job", "list", "--config", str(config))

    assert result.returncode == 1, str(result)
    assert first_line(result.stderr).startswith(f"error: {config}"), str(result)
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- options


def test_job_list_state_bogus_without_cluster_rejected_exit_2(iris: IrisRunner) -> None:
    result = iris("job", "list", "--state", "bogus", "--controller-url", f"http://127.0.0.1:{closed_port()}")

    assert result.returncode == 2, str(result)
    assert "Invalid value for --state" in result.stderr, str(result)
    assert "unknown job state 'bogus'" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_bad_memory_value_rejected_exit_2(iris: IrisRunner) -> None:
    result = iris(
        "run", "--memory", "lots", "--controller-url", f"http://127.0.0.1:{closed_port()}", "--", "true"
    )

    assert result.returncode == 2, str(result)
    assert "lots" in result.stderr, str(result)
    assert "Traceback" not in result.stderr


def test_unknown_command_rejected_exit_2(iris: IrisRunner) -> None:
    result = iris("jobs")

    assert result.returncode == 2, str(result)
    assert "No such command 'jobs'" in result.stderr, str(result)


# ---------------------------------------------------------------- Ctrl-C while starting

# Runs the `iris` console script's own code (`from iris.cli.main import main; sys.exit(main())`)
# with a real SIGINT delivered while the CLI is importing its command modules, as a user pressing
# Ctrl-C right after typing a command would.
CTRL_C_DURING_IMPORTS = textwrap.dedent(
    """\
    import os, signal, sys

    class CtrlCOnImport:
        def find_spec(self, name, path=None, target=None):
            if name == "iris.cli.job":
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, CtrlCOnImport())
    sys.argv = ["iris", "job", "list"]
    from iris.cli.main import main
    sys.exit(main())
    """
)


def test_ctrl_c_during_cli_imports_exits_130_without_traceback() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", CTRL_C_DURING_IMPORTS], check=False, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr, result.stderr
