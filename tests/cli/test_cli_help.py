"""`--help` answers for the main commands and mentions their key options."""

from __future__ import annotations

import pytest
from cli_support import IrisRunner


def test_iris_help_lists_commands_and_global_options(iris: IrisRunner) -> None:
    result = iris("--help")

    assert result.returncode == 0, str(result)
    assert result.stdout.startswith("Usage: iris [OPTIONS] COMMAND"), str(result)
    for word in ("run", "submit", "job", "cluster", "--traceback", "--version"):
        assert word in result.stdout, f"{word!r} missing from:\n{result.stdout}"
    assert result.stderr == ""


def test_iris_short_help_flag_same_as_long(iris: IrisRunner) -> None:
    assert iris("-h").stdout == iris("--help").stdout


def test_run_help_mentions_key_options(iris: IrisRunner) -> None:
    result = iris("run", "--help")

    assert result.returncode == 0, str(result)
    assert result.stdout.startswith("Usage: iris run [OPTIONS] COMMAND..."), str(result)
    for option in (
        "--config",
        "--controller-url",
        "--local",
        "--no-wait",
        "-e, --env KEY=VALUE",
        "--cpu",
        "--memory",
    ):
        assert option in result.stdout, f"{option!r} missing from:\n{result.stdout}"
    assert "iris run --local -- python" in result.stdout, "help should show an example"


def test_cluster_help_mentions_config_and_subcommands(iris: IrisRunner) -> None:
    result = iris("cluster", "--help")

    assert result.returncode == 0, str(result)
    assert result.stdout.startswith("Usage: iris cluster [OPTIONS] COMMAND"), str(result)
    for word in ("--config", "start", "stop", "restart", "status", "controller"):
        assert word in result.stdout, f"{word!r} missing from:\n{result.stdout}"


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (("submit",), ("SCRIPT", "main()", "--local", "--config")),
        (("job",), ("list", "status", "logs", "kill")),
        (("job", "list"), ("--state", "--json", "--config", "--controller-url")),
        (("job", "status"), ("JOB_ID", "--json")),
        (("job", "logs"), ("JOB_ID", "--follow")),
        (("cluster", "controller", "run-local"), ("--port",)),
    ],
    ids=["submit", "job", "job-list", "job-status", "job-logs", "controller-run-local"],
)
def test_subcommand_help_answers_with_options(
    iris: IrisRunner, command: tuple[str, ...], words: tuple[str, ...]
) -> None:
    result = iris(*command, "--help")

    assert result.returncode == 0, str(result)
    assert result.stdout.startswith(f"Usage: iris {' '.join(command)}"), str(result)
    for word in words:
        assert word in result.stdout, f"{word!r} missing from:\n{result.stdout}"


def test_iris_version_prints_version(iris: IrisRunner) -> None:
    result = iris("--version")

    assert result.returncode == 0, str(result)
    assert result.stdout.startswith("iris, version "), str(result)
