"""The one place a controller request's bearer token is checked.

`RequireToken` is a Connect metadata interceptor: it runs before the request body is read, so a
caller without a valid token costs the server no parsing. It answers `unauthenticated` (no token,
or one that names nobody) or `permission_denied` (the role may not call the method), and leaves
the caller's identity where handlers find it (`caller()`) for ownership checks.
"""

from __future__ import annotations

import contextvars
import hmac
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext

from iris.cluster.auth.policy import OPEN_METHODS, refusal_for_call
from iris.cluster.auth.tokens import Identity, InvalidTokenError, TokenVerifier

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

_BEARER = "bearer "
_caller: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("iris_auth_caller", default=None)


def bearer_token(headers: Mapping[str, str]) -> str:
    value = headers.get("authorization", "")
    return value[len(_BEARER) :].strip() if value[: len(_BEARER)].lower() == _BEARER else ""


def caller() -> Identity | None:
    """Who made the request being served; None when auth is off (everyone may do anything)."""
    return _caller.get()


class RequireToken:
    def __init__(self, verifier: TokenVerifier, clock: Callable[[], float] = time.time):
        self._verifier = verifier
        self._clock = clock

    def identify(self, headers: Mapping[str, str]) -> Identity:
        token = bearer_token(headers)
        if not token:
            raise ConnectError(
                Code.UNAUTHENTICATED,
                "this cluster requires a token: send 'Authorization: Bearer <token>' "
                "(the CLI reads IRIS_TOKEN or the file iris login writes)",
            )
        try:
            return self._verifier.identify(token, int(self._clock()))
        except InvalidTokenError as exc:
            raise ConnectError(Code.UNAUTHENTICATED, f"the token was refused: {exc}") from None

    async def on_start(self, ctx: RequestContext) -> None:
        method = ctx.method.name
        if method in OPEN_METHODS:
            return
        identity = self.identify(ctx.request_headers)
        refusal = refusal_for_call(identity, method)
        if refusal:
            raise ConnectError(Code.PERMISSION_DENIED, refusal)
        _caller.set(identity)

    async def on_end(self, token: None, ctx: RequestContext, error: Exception | None) -> None:
        """Nothing to undo: the caller's identity goes with the request's task."""

    def refuse_http(self, request: Request) -> Response | None:
        """For plain HTTP routes (/metrics): a Connect-shaped JSON error, or None to serve it."""
        # Here, not at the top: a worker checks tokens too and serves without Starlette.
        from starlette.responses import JSONResponse

        try:
            self.identify(request.headers)
        except ConnectError as exc:
            return JSONResponse({"code": "unauthenticated", "message": exc.message}, status_code=401)
        return None


class RequireCallbackToken:
    """A worker's check of the controller's calls: the bearer must be the secret the worker gave
    the controller when it registered."""

    def __init__(self, secret: str):
        self._secret = secret.encode()

    async def on_start(self, ctx: RequestContext) -> None:
        presented = bearer_token(ctx.request_headers).encode()
        if not hmac.compare_digest(presented, self._secret):
            raise ConnectError(
                Code.UNAUTHENTICATED,
                "only this worker's controller may call it (the bearer token does not match)",
            )

    async def on_end(self, token: None, ctx: RequestContext, error: Exception | None) -> None:
        """Nothing to undo: the caller's identity goes with the request's task."""
