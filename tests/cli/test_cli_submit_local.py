"""`iris submit script.py --local`: run a script's main() remotely and print what it returns."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cli_support import IrisRunner


def _script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


def test_submit_local_main_returns_value_prints_value(iris: IrisRunner) -> None:
    script = _script(
        iris.cwd,
        "answer.py",
        """\
        def main():
            print("working on it")
            return {"answer": 42, "items": [1, 2]}
        """,
    )

    result = iris("submit", str(script), "--local")

    assert result.returncode == 0, str(result)
    lines = result.stdout.splitlines()
    assert "working on it" in lines, str(result)
    assert lines[-1] == "{'answer': 42, 'items': [1, 2]}", str(result)


def test_submit_local_args_are_passed_to_main(iris: IrisRunner) -> None:
    script = _script(
        iris.cwd,
        "echo_args.py",
        """\
        def main(*args):
            return list(args)
        """,
    )

    result = iris("submit", str(script), "alpha", "beta", "--local")

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines()[-1] == "['alpha', 'beta']", str(result)


def test_submit_local_main_raises_exits_nonzero_with_remote_exception(iris: IrisRunner) -> None:
    script = _script(
        iris.cwd,
        "explode.py",
        """\
        def main():
            raise ValueError("kaboom from the remote side")
        """,
    )

    result = iris("submit", str(script), "--local")

    assert result.returncode != 0, str(result)
    assert "ValueError: kaboom from the remote side" in result.stderr, str(result)
    assert "failed" in result.stderr, str(result)
    assert "kaboom" not in result.stdout


def test_submit_script_without_main_says_so(iris: IrisRunner) -> None:
    script = _script(iris.cwd, "no_main.py", "x = 1\n")

    result = iris("submit", str(script), "--local")

    assert result.returncode == 1, str(result)
    assert "does not define a main() function" in result.stderr, str(result)
    assert "starting a local cluster" not in result.stderr
    assert "Traceback" not in result.stderr


def test_submit_local_no_wait_rejected_with_clear_message(iris: IrisRunner) -> None:
    script = _script(iris.cwd, "noop.py", "def main():\n    return 1\n")

    result = iris("submit", str(script), "--local", "--no-wait")

    assert result.returncode == 2, str(result)
    assert "--no-wait" in result.stderr and "--local" in result.stderr
    assert "Traceback" not in result.stderr
