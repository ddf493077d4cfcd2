"""How a protobuf service method is named in Python: the generated Connect code's snake_case."""

from __future__ import annotations

import re

_WORD_START = re.compile(r"(?<!^)(?=[A-Z])")


def python_name(method_name: str) -> str:
    """`GetJobStatus` -> `get_job_status`."""
    return _WORD_START.sub("_", method_name).lower()
