"""The README's shell and Python blocks, run in order as a new user would, against a local cluster.

Two things differ from a user's machine, neither in what the commands do: `uv run iris` runs as
this interpreter's `-m iris.cli.main`, and examples/local.yaml gets a free controller port and a
private state directory (other clusters on this machine may hold port 10000), so the README's
http://localhost:10000 becomes that port. A block on the line right after
`<!-- readme-test: skip: REASON -->` is not run.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from cli_support import IRIS, IrisRunner, closed_port, kill_all, process_tree

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"(<!-- readme-test: skip: [^>]*-->\n)?```(bash|python)\n(.*?)```", re.S)
COMMAND_TIMEOUT_S = 180


def readme_blocks() -> list[tuple[str, str]]:
    """(language, code) of every bash and python block not marked to skip, in README order."""
    text = (REPO / "README.md").read_text()
    return [(m.group(2), m.group(3)) for m in BLOCK.finditer(text) if not m.group(1)]


def shell_commands(code: str) -> list[str]:
    joined = code.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_readme_blocks_run_as_written(tmp_path: Path, iris_home: Path) -> None:
    clone = tmp_path / "clone"
    (clone / "examples").mkdir(parents=True)
    config = yaml.safe_load((REPO / "examples" / "local.yaml").read_text())
    port = closed_port()
    config["controller"] = {"local": {"port": port, "state_dir": str(tmp_path / "state")}}
    (clone / "examples" / "local.yaml").write_text(yaml.safe_dump(config))
    (clone / "examples" / "train.py").write_text((REPO / "examples" / "train.py").read_text())
    runner = IrisRunner(iris_home, clone)
    url = f"http://localhost:{port}"
    iris = " ".join(shlex.quote(part) for part in IRIS)

    blocks = readme_blocks()
    assert [language for language, _ in blocks].count("python") == 1, "the README's Python example"
    outputs: list[str] = []
    pid_file = tmp_path / "state" / "cluster.pid"
    cluster_tree = []
    try:
        for language, code in blocks:
            code = code.replace("http://localhost:10000", url)
            if language == "python":
                script = clone / "readme_example.py"
                script.write_text(code)
                commands = [[sys.executable, str(script)]]
            else:
                commands = [
                    ["bash", "-c", line.replace("uv run iris", iris).replace("uv run python", sys.executable)]
                    for line in shell_commands(code)
                ]
            for command in commands:
                result = subprocess.run(
                    command,
                    cwd=clone,
                    env=runner.env(),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT_S,
                )
                shown = f"$ {command[-1]}\n{result.stdout}{result.stderr}"
                assert result.returncode == 0, f"README command failed:\n{shown}"
                outputs.append(shown)
                if pid_file.exists() and not cluster_tree:
                    cluster_tree = process_tree(int(pid_file.read_text()))
    finally:
        if pid_file.exists():
            runner("cluster", "--config", str(clone / "examples" / "local.yaml"), "stop", "--yes")
        kill_all(cluster_tree)

    everything = "\n".join(outputs)
    assert "hello from iris" in everything
    assert "step 2: loss 0.333" in everything
    assert "training for 1000 steps" in everything and "0.01" in everything
    assert '"jobs"' in everything, "the curl example answers with the job list"
    assert "cluster 'local' stopped" in everything
