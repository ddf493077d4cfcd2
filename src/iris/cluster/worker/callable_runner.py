"""Runs a cloudpickled callable inside a task and writes its outcome for the worker to collect.

Invoked as `python -m iris.cluster.worker.callable_runner CALLABLE_PICKLE RESULT_PICKLE`. The result
file holds cloudpickle of ("ok", value) or ("error", exception, formatted traceback); the process
exits 1 on error so the attempt counts as failed.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import cloudpickle


def main(argv: list[str]) -> int:
    callable_path, result_path = Path(argv[0]), Path(argv[1])
    fn, args, kwargs = cloudpickle.loads(callable_path.read_bytes())
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # the user's code may raise anything, SystemExit included
        formatted = traceback.format_exc()
        sys.stderr.write(formatted)
        try:
            payload = cloudpickle.dumps(("error", exc, formatted))
        except Exception:
            # The exception itself may not pickle; its text and traceback still travel.
            payload = cloudpickle.dumps(("error", RuntimeError(f"{type(exc).__name__}: {exc}"), formatted))
        result_path.write_bytes(payload)
        return 1
    result_path.write_bytes(cloudpickle.dumps(("ok", value)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
