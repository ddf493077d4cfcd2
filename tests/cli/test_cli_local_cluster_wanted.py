"""Which command lines start a local cluster before click parses them (`iris.cli.main`)."""

from __future__ import annotations

import pytest

from iris.cli.main import local_cluster_wanted


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--local", "--", "python", "-c", "print(1)"], (True, False)),
        (["-v", "run", "--cpu", "2", "--local", "--", "true"], (True, True)),
        (["--traceback", "submit", "job.py", "--local"], (True, False)),
        (["run", "--", "python", "--local"], (False, False)),
        (["run", "--local", "--help"], (False, False)),
        (["run", "--no-wait", "--local", "--", "true"], (False, False)),
        (["run", "--local", "--controller-url=http://127.0.0.1:1", "--", "true"], (False, False)),
        (["job", "list", "--local"], (False, False)),
        (["--config", "c.yaml", "run", "--local", "--", "true"], (False, False)),
        ([], (False, False)),
    ],
)
def test_local_cluster_wanted_only_for_run_or_submit_with_local_before_the_command(
    args: list[str], expected: tuple[bool, bool]
) -> None:
    assert local_cluster_wanted(args) == expected
