"""Errors as the Google APIs send them: one exception, rendered in each API's own body shape.

The TPU API (like every newer Google API) answers `{"error": {"code", "message", "status",
"details": [ErrorInfo]}}`; Compute v1 answers `{"error": {"code", "message", "errors": [{"domain",
"reason", "message"}]}}`. gcloud prints `STATUS: message` for the first and `Could not fetch
resource:\\n - message` for the second, so the platform's error table matches on those texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# HTTP code -> (google.rpc status, Compute's reason) for the errors the fake produces.
_STATUSES: dict[int, tuple[str, str]] = {
    400: ("INVALID_ARGUMENT", "invalid"),
    403: ("PERMISSION_DENIED", "forbidden"),
    404: ("NOT_FOUND", "notFound"),
    409: ("ALREADY_EXISTS", "alreadyExists"),
    412: ("FAILED_PRECONDITION", "conditionNotMet"),
    429: ("RESOURCE_EXHAUSTED", "rateLimitExceeded"),
    500: ("INTERNAL", "backendError"),
    503: ("UNAVAILABLE", "backendError"),
}


@dataclass
class ApiError(Exception):
    code: int
    message: str
    # Machine-readable cause (ErrorInfo.reason / errors[].reason); the status's default otherwise.
    reason: str = ""
    domain: str = "googleapis.com"
    metadata: dict[str, str] = field(default_factory=dict)
    # Compute's errors[].reason when it differs from the code's usual one.
    compute_reason: str = ""

    @property
    def status(self) -> str:
        return _STATUSES.get(self.code, ("UNKNOWN", "unknown"))[0]

    def tpu_body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.reason:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": self.domain,
                    "metadata": self.metadata,
                }
            ]
        return {"error": error}

    def compute_body(self) -> dict[str, Any]:
        reason = self.compute_reason or _STATUSES.get(self.code, ("", "unknown"))[1]
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "errors": [{"domain": "global", "reason": reason, "message": self.message}],
            }
        }


def not_found(resource: str) -> ApiError:
    return ApiError(404, f"The resource '{resource}' was not found")


def permission_denied(permission: str, resource: str) -> ApiError:
    return ApiError(
        403,
        f"Permission '{permission}' denied on '{resource}'",
        reason="IAM_PERMISSION_DENIED",
        domain="iam.googleapis.com",
        metadata={"permission": permission, "resource": resource},
    )


def unavailable() -> ApiError:
    return ApiError(503, "The service is currently unavailable.")
