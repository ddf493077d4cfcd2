"""Tokens, roles and the auth config as pure functions: no network, no daemon."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from pathlib import Path

import pytest

from iris.cluster.auth.policy import OPEN_METHODS, refusal_for_call, refusal_for_job
from iris.cluster.auth.tokens import (
    AuthMode,
    Identity,
    InvalidTokenError,
    Role,
    TokenVerifier,
    load_or_create_key,
    sign_session_token,
    token_digest,
    verify_session_token,
)
from iris.config import ConfigError, apply_defaults, load_config_from_dict, validate_config
from iris.rpc import cluster_pb2

KEY = b"k" * 32
NOW = 1_800_000_000
ALICE = Identity("alice", Role.USER)
ADMIN_TOKEN = "admin-token-0123456789"
ALICE_TOKEN = "alice-token-0123456789"


def _verifier(mode: AuthMode) -> TokenVerifier:
    static = [(token_digest(ADMIN_TOKEN), Identity("root", Role.ADMIN)), (token_digest(ALICE_TOKEN), ALICE)]
    return TokenVerifier(mode, KEY, static)


def test_session_token_signed_then_verified_names_its_holder() -> None:
    token = sign_session_token(KEY, ALICE, NOW, 60)

    claims = verify_session_token(KEY, token, NOW + 59)

    assert claims.identity == ALICE
    assert claims.expires_at_s == NOW + 60


def test_session_token_past_its_expiry_is_refused() -> None:
    token = sign_session_token(KEY, ALICE, NOW, 60)

    with pytest.raises(InvalidTokenError, match="expired"):
        verify_session_token(KEY, token, NOW + 60)


def test_session_token_of_another_key_is_refused() -> None:
    token = sign_session_token(b"x" * 32, ALICE, NOW, 60)

    with pytest.raises(InvalidTokenError, match="signature"):
        verify_session_token(KEY, token, NOW)


def test_session_token_with_edited_claims_is_refused() -> None:
    header, _, signature = sign_session_token(KEY, ALICE, NOW, 60).split(".")
    forged = {"iss": "iris", "sub": "alice", "role": "admin", "iat": NOW, "exp": NOW + 60}
    body = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()

    with pytest.raises(InvalidTokenError, match="signature"):
        verify_session_token(KEY, f"{header}.{body}.{signature}", NOW)


def test_session_token_claiming_alg_none_is_refused() -> None:
    _, body, _ = sign_session_token(KEY, ALICE, NOW, 60).split(".")
    header = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()

    with pytest.raises(InvalidTokenError):
        verify_session_token(KEY, f"{header}.{body}.", NOW)


@pytest.mark.parametrize("garbage", ["a.b.c", "..", "x" * 100, "ü.ü.ü", "e30.e30.e30"])
def test_malformed_tokens_are_refused_without_quoting_them(garbage: str) -> None:
    with pytest.raises(InvalidTokenError) as raised:
        _verifier(AuthMode.STATIC).identify(garbage, NOW)

    assert garbage not in str(raised.value)


def test_static_mode_accepts_configured_and_session_tokens() -> None:
    verifier = _verifier(AuthMode.STATIC)
    session, _ = verifier.issue(ALICE, NOW)

    assert verifier.identify(ALICE_TOKEN, NOW) == ALICE
    assert verifier.identify(session, NOW) == ALICE


def test_jwt_mode_takes_configured_tokens_only_to_log_in() -> None:
    verifier = _verifier(AuthMode.JWT)

    with pytest.raises(InvalidTokenError, match="iris login"):
        verifier.identify(ALICE_TOKEN, NOW)
    assert verifier.identify_for_login(ALICE_TOKEN, NOW) == ALICE


def test_unknown_token_is_refused() -> None:
    with pytest.raises(InvalidTokenError, match="unknown"):
        _verifier(AuthMode.STATIC).identify("not-a-configured-token", NOW)


def test_session_key_created_once_with_owner_only_permissions(tmp_path: Path) -> None:
    path = tmp_path / "auth" / "jwt_hmac.key"

    first = load_or_create_key(path)
    second = load_or_create_key(path)

    assert first == second and len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_session_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jwt_hmac.key"
    load_or_create_key(path)
    path.chmod(0o644)

    with pytest.raises(ValueError, match="chmod 600"):
        load_or_create_key(path)


def test_every_method_but_login_needs_a_role_and_workers_cannot_launch() -> None:
    methods = [m.name for m in cluster_pb2.DESCRIPTOR.services_by_name["ControllerService"].methods]
    worker = Identity("w", Role.WORKER)

    assert OPEN_METHODS == {"Login"}
    assert refusal_for_call(worker, "LaunchJob") is not None
    assert refusal_for_call(worker, "Register") is None
    assert refusal_for_call(ALICE, "Register") is not None
    assert refusal_for_call(ALICE, "CreateToken") is not None
    assert all(refusal_for_call(Identity("root", Role.ADMIN), m) is None for m in methods)


def test_job_refusal_names_the_owner_and_spares_owner_and_admin() -> None:
    refusal = refusal_for_job(Identity("bob", Role.USER), "kill", "/train", "alice")

    assert refusal is not None and "alice" in refusal and "bob" in refusal
    assert refusal_for_job(ALICE, "kill", "/train", "alice") is None
    assert refusal_for_job(Identity("root", Role.ADMIN), "kill", "/train", "alice") is None
    assert refusal_for_job(ALICE, "kill", "/old", "") is not None


def _config(auth: dict) -> None:
    data = {"platform": {"local": {}}, "storage": {"bundle_prefix": "file:///tmp/b"}, "auth": auth}
    validate_config(apply_defaults(load_config_from_dict(data)))


def test_config_with_token_digest_loads() -> None:
    digest = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()

    _config({"mode": "jwt", "static_tokens": [{"token_sha256": digest, "user": "root", "role": "admin"}]})


@pytest.mark.parametrize(
    ("auth", "problem"),
    [
        ({"mode": "sometimes"}, "unknown auth mode"),
        ({"mode": "static"}, "at least one token"),
        (
            {"mode": "static", "static_tokens": [{"token": "short", "user": "a", "role": "user"}]},
            "16 characters",
        ),
        (
            {"mode": "static", "static_tokens": [{"token": ALICE_TOKEN, "user": "a", "role": "boss"}]},
            "unknown role",
        ),
        (
            {"mode": "static", "static_tokens": [{"token": ALICE_TOKEN, "user": "a b", "role": "user"}]},
            "user name",
        ),
        (
            {"mode": "static", "static_tokens": [{"token_sha256": "zz", "user": "a", "role": "user"}]},
            "64 hex",
        ),
    ],
)
def test_config_auth_problem_is_named_without_the_token(auth: dict, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        _config(auth)

    assert ALICE_TOKEN not in str(raised.value)
