"""Bearer tokens as pure functions: configured (static) tokens and session tokens the controller
signs (JWT, HS256, with a key it generates once and keeps in its state directory).

A token is a secret: nothing here puts one into an exception message or a log line. Errors say
what is wrong with a token (expired, bad signature, unknown) without quoting it.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.limits import quote_prefix
from iris.rpc import config_pb2

# A session token lives this long unless the config or `iris token create --ttl` says otherwise.
DEFAULT_SESSION_TTL_S = 24 * 3600
# What the controller mints for the workers it starts: they outlive any one login.
WORKER_TOKEN_TTL_S = 365 * 24 * 3600
# A task's token (its job owner's) must outlast the longest job.
TASK_TOKEN_TTL_S = 30 * 24 * 3600
JWT_KEY_BYTES = 32
JWT_ISSUER = "iris"
_JWT_HEADER = {"alg": "HS256", "typ": "JWT"}
# Tokens longer than this are refused before any parsing or hashing.
MAX_TOKEN_CHARS = 8192
_USER_NAME = re.compile(r"[A-Za-z0-9._@-]{1,128}")


class Role(enum.Enum):
    ADMIN = "admin"
    USER = "user"
    WORKER = "worker"


class AuthMode(enum.Enum):
    NONE = "none"
    STATIC = "static"
    JWT = "jwt"


class InvalidTokenError(ValueError):
    """The token names nobody: unknown, malformed, badly signed or expired."""


@dataclass(frozen=True)
class Identity:
    user: str
    role: Role


@dataclass(frozen=True)
class SessionClaims:
    identity: Identity
    expires_at_s: int


def check_user_name(user: str) -> None:
    """A user name is 1 to 128 letters, digits and . _ @ -: it is printed in job listings and errors."""
    if not _USER_NAME.fullmatch(user):
        raise ValueError(
            f"invalid user name {quote_prefix(user)}: use 1 to 128 letters, digits and the characters . _ @ -"
        )


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def static_token_digest(entry: config_pb2.StaticToken) -> bytes:
    """The digest a configured token is known by, from `token` or `token_sha256`."""
    if entry.token:
        return token_digest(entry.token)
    try:
        digest = bytes.fromhex(entry.token_sha256)
    except ValueError:
        digest = b""
    if len(digest) != hashlib.sha256().digest_size:
        raise ValueError(f"token_sha256 of {entry.user} is not 64 hex digits (printf %s TOKEN | sha256sum)")
    return digest


def parse_role(text: str) -> Role:
    try:
        return Role(text.strip().lower())
    except ValueError:
        raise ValueError(
            f"unknown role {text[:20]!r}: use one of {', '.join(r.value for r in Role)}"
        ) from None


def parse_mode(text: str) -> AuthMode:
    try:
        return AuthMode((text or "none").strip().lower())
    except ValueError:
        raise ValueError(
            f"unknown auth mode {text[:20]!r}: use one of {', '.join(m.value for m in AuthMode)}"
        ) from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_session_token(key: bytes, identity: Identity, now_s: int, ttl_s: int) -> str:
    claims = {
        "iss": JWT_ISSUER,
        "sub": identity.user,
        "role": identity.role.value,
        "iat": now_s,
        "exp": now_s + ttl_s,
    }
    signing_input = (
        _b64(json.dumps(_JWT_HEADER, separators=(",", ":")).encode())
        + "."
        + _b64(json.dumps(claims, separators=(",", ":")).encode())
    )
    signature = hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)


def verify_session_token(key: bytes, token: str, now_s: int) -> SessionClaims:
    """The claims of a token this controller signed, or InvalidTokenError saying why not."""
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidTokenError("not a session token")
    signing_input = f"{parts[0]}.{parts[1]}".encode("ascii", "replace")
    expected = hmac.new(key, signing_input, hashlib.sha256).digest()
    try:
        header = json.loads(_unb64(parts[0]))
        signature = _unb64(parts[2])
    except (ValueError, UnicodeDecodeError):
        raise InvalidTokenError("malformed session token") from None
    # Only the algorithm we sign with: a token may not choose "none" or another key type.
    if (
        not isinstance(header, dict)
        or header.get("alg") != "HS256"
        or not hmac.compare_digest(signature, expected)
    ):
        raise InvalidTokenError("session token signature does not match this cluster's key")
    try:
        claims = json.loads(_unb64(parts[1]))
        identity = Identity(str(claims["sub"]), parse_role(str(claims["role"])))
        expires_at_s = int(claims["exp"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidTokenError("malformed session token claims") from None
    if claims.get("iss") != JWT_ISSUER:
        raise InvalidTokenError("session token was not issued by an Iris controller")
    if expires_at_s <= now_s:
        raise InvalidTokenError("session token expired: log in again (iris login)")
    return SessionClaims(identity, expires_at_s)


def load_or_create_key(path: Path) -> bytes:
    """The HMAC key at `path`, created (mode 0600, in a 0700 directory) the first time."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) < JWT_KEY_BYTES:
            raise ValueError(
                f"the session key file {path} is shorter than {JWT_KEY_BYTES} bytes: remove it to make a new one"
            )
        if path.stat().st_mode & 0o077:
            raise ValueError(f"the session key file {path} is readable by others: chmod 600 it")
        return key
    key = secrets.token_bytes(JWT_KEY_BYTES)
    with os.fdopen(fd, "wb") as out:
        out.write(key)
    return key


class TokenVerifier:
    """Who a bearer token names, under one cluster's auth config."""

    def __init__(
        self,
        mode: AuthMode,
        key: bytes,
        static_tokens: Iterable[tuple[bytes, Identity]] = (),
        session_ttl_s: int = DEFAULT_SESSION_TTL_S,
    ):
        self.mode = mode
        self.session_ttl_s = session_ttl_s
        self._key = key
        # Keyed by SHA-256 digest: the lookup's timing says nothing about the table's tokens, and
        # a config may name a token by its digest alone.
        self._static = dict(static_tokens)

    @classmethod
    def from_config(cls, auth: config_pb2.AuthConfig, default_key_path: Path) -> TokenVerifier:
        mode = parse_mode(auth.mode)
        key_path = Path(auth.jwt_key_file).expanduser() if auth.jwt_key_file else default_key_path
        static = []
        for entry in auth.static_tokens:
            check_user_name(entry.user)
            static.append((static_token_digest(entry), Identity(entry.user, parse_role(entry.role))))
        ttl = (
            auth.session_ttl.milliseconds // 1000 if auth.session_ttl.milliseconds else DEFAULT_SESSION_TTL_S
        )
        return cls(mode, load_or_create_key(key_path), static, ttl)

    def _static_identity(self, token: str) -> Identity | None:
        return self._static.get(token_digest(token))

    def identify(self, token: str, now_s: int) -> Identity:
        """The caller a request's bearer token names; InvalidTokenError when it names nobody."""
        return self._identify(token, now_s, allow_static=self.mode is AuthMode.STATIC)

    def identify_for_login(self, token: str, now_s: int) -> Identity:
        """Login takes a configured token in every mode: that is how a user gets a session."""
        return self._identify(token, now_s, allow_static=True)

    def _identify(self, token: str, now_s: int, allow_static: bool) -> Identity:
        if not token:
            raise InvalidTokenError("no token")
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidTokenError(f"token longer than {MAX_TOKEN_CHARS} characters")
        if allow_static:
            identity = self._static_identity(token)
            if identity is not None:
                return identity
        elif self._static_identity(token) is not None:
            raise InvalidTokenError(
                "this cluster takes session tokens only: exchange the token with iris login"
            )
        if token.count(".") == 2:
            return verify_session_token(self._key, token, now_s).identity
        raise InvalidTokenError("unknown token")

    def issue(self, identity: Identity, now_s: int, ttl_s: int | None = None) -> tuple[str, int]:
        """A new session token for `identity` and when it expires (epoch seconds)."""
        ttl = ttl_s if ttl_s is not None else self.session_ttl_s
        return sign_session_token(self._key, identity, now_s, ttl), now_s + ttl
