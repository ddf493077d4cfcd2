"""Client API: `from iris.client import IrisClient`.

The names below are imported from their modules when first used: a worker imports
`iris.client.credentials`, and with it this package, and must not pay for the whole client
(cloudpickle, the bundle builder) on its way to registering.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iris.client.client import (
        ControllerUnavailableError,
        InvalidRequestError,
        IrisClient,
        IrisContext,
        IrisError,
        Job,
        JobFailedError,
        JobNotFoundError,
        JobTimeoutError,
        LogEntry,
        iris_ctx,
    )
    from iris.cluster.types import JobState

__all__ = [
    "ControllerUnavailableError",
    "InvalidRequestError",
    "IrisClient",
    "IrisContext",
    "IrisError",
    "Job",
    "JobFailedError",
    "JobNotFoundError",
    "JobState",
    "JobTimeoutError",
    "LogEntry",
    "iris_ctx",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = "iris.cluster.types" if name == "JobState" else "iris.client.client"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
