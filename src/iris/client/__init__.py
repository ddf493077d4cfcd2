"""Client API: `from iris.client import IrisClient`."""

from iris.client.client import (
    ControllerUnavailableError,
    IrisClient,
    IrisContext,
    IrisError,
    Job,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    iris_ctx,
)

__all__ = [
    "ControllerUnavailableError",
    "IrisClient",
    "IrisContext",
    "IrisError",
    "Job",
    "JobFailedError",
    "JobNotFoundError",
    "JobTimeoutError",
    "iris_ctx",
]
