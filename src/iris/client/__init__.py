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
    iris_ctx,
)

__all__ = [
    "ControllerUnavailableError",
    "IrisClient",
    "InvalidRequestError",
    "IrisContext",
    "IrisError",
    "Job",
    "JobFailedError",
    "JobNotFoundError",
    "JobTimeoutError",
    "iris_ctx",
]
