"""Client API: `from iris.client import IrisClient`."""

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
