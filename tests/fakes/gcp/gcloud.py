"""The real gcloud CLI pointed at a FakeGcp: one subprocess per call, with the fake's environment."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

GCLOUD_TIMEOUT_S = 180.0


@dataclass
class Gcloud:
    env: dict[str, str]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["gcloud", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=GCLOUD_TIMEOUT_S,
            check=False,
        )

    def ok(self, *args: str) -> str:
        """Run, insist on success, return stdout."""
        result = self(*args)
        assert result.returncode == 0, f"gcloud {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--format=json"))

    def error(self, *args: str) -> str:
        """Run, insist on failure (exit 1, as gcloud's API errors), return stderr."""
        result = self(*args)
        assert result.returncode == 1, f"gcloud {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        return result.stderr
