"""The CLI end to end against a local cluster with auth on: IRIS_TOKEN, `iris login`, `iris token
create`, refusals a user can act on, and no token in any output, log or state file."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import IRIS, IrisResult, IrisRunner, LocalClusterConfig, write_local_config

ADMIN_TOKEN = "cli-admin-token-0f3c9a7e51"
ALICE_TOKEN = "cli-alice-token-8d2b6e4a90"
# Every session token the controller signs starts with this (the encoded {"alg":"HS256","typ":"JWT"}):
# grepping for it finds worker and task tokens the test never sees.
SESSION_TOKEN_PREFIX = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
AUTH_YAML = f"""\
auth:
  mode: static
  static_tokens:
    - {{token_sha256: "{hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()}", user: root, role: admin}}
    - {{token: "{ALICE_TOKEN}", user: alice, role: user}}
"""


class AuthCli:
    """Runs iris against the auth cluster with a private token file, recording every output."""

    def __init__(self, cluster: LocalClusterConfig, config_home: Path) -> None:
        self.cluster = cluster
        self.config_home = config_home
        self.outputs: list[str] = []

    def env(self, token: str | None) -> dict[str, str]:
        env = {"XDG_CONFIG_HOME": str(self.config_home), "IRIS_TOKEN": token or ""}
        return env

    def __call__(self, *args: str, token: str | None = None) -> IrisResult:
        split = args.index("--") if "--" in args else len(args)
        full = (*args[:split], "--config", str(self.cluster.path), *args[split:])
        result = self.cluster.runner(*full, env=self.env(token))
        self.outputs += [result.stdout, result.stderr]
        return result

    def login(self, credential: str) -> IrisResult:
        runner = self.cluster.runner
        process = subprocess.run(
            [*IRIS, "login", "--config", str(self.cluster.path)],
            input=credential + "\n",
            capture_output=True,
            text=True,
            env=runner.env(self.env(None)),
            cwd=runner.cwd,
            timeout=120,
            check=False,
        )
        self.outputs += [process.stdout, process.stderr]
        return IrisResult(["login"], process.returncode, process.stdout, process.stderr)


@pytest.fixture(scope="module")
def auth_cli(tmp_path_factory: pytest.TempPathFactory, iris_home: Path) -> Iterator[AuthCli]:
    directory = tmp_path_factory.mktemp("auth-cluster")
    (directory / "work").mkdir()
    path, state_dir = write_local_config(directory, "cli-auth", AUTH_YAML)
    cluster = LocalClusterConfig("cli-auth", path, state_dir, IrisRunner(iris_home, directory / "work"))
    cli = AuthCli(cluster, directory / "config-home")
    try:
        cluster.start()
        cli.outputs += (
            [cluster.start_result.stdout, cluster.start_result.stderr] if cluster.start_result else []
        )
        yield cli
    finally:
        cluster.stop()


def test_cluster_start_without_a_token_says_how_to_log_in(auth_cli: AuthCli) -> None:
    result = auth_cli.cluster.start_result

    assert result is not None and "iris login" in result.stdout


def test_cluster_stop_without_a_token_keeps_running_unless_told_yes(auth_cli: AuthCli) -> None:
    result = auth_cli("cluster", "stop")

    assert result.returncode == 1
    assert "cannot be listed" in result.stderr and "--yes" in result.stderr
    assert auth_cli("job", "list", token=ALICE_TOKEN).returncode == 0


def test_command_without_a_token_is_refused_with_a_reason(auth_cli: AuthCli) -> None:
    result = auth_cli("job", "list")

    assert result.returncode == 1
    assert "requires a token" in result.stderr and "IRIS_TOKEN" in result.stderr


def test_command_with_an_unknown_token_is_refused(auth_cli: AuthCli) -> None:
    result = auth_cli("job", "list", token="no-such-token-anywhere")

    assert result.returncode == 1
    assert "the token was refused: unknown token" in result.stderr
    assert "no-such-token-anywhere" not in result.stderr


def test_run_with_iris_token_runs_the_job(auth_cli: AuthCli) -> None:
    result = auth_cli("run", "--name", "alice-hello", "--", "echo", "hello from alice", token=ALICE_TOKEN)

    assert result.returncode == 0, str(result)
    assert "hello from alice" in result.stdout


def test_login_writes_an_owner_only_token_file_later_commands_use(auth_cli: AuthCli) -> None:
    login = auth_cli.login(ALICE_TOKEN)
    token_file = auth_cli.config_home / "iris" / "token"

    listed = auth_cli("job", "list", "--json")

    assert login.returncode == 0, str(login)
    assert "logged in as alice (user)" in login.stdout
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().startswith(SESSION_TOKEN_PREFIX)
    assert listed.returncode == 0, str(listed)
    assert "/alice-hello" in {job["jobId"] for job in json.loads(listed.stdout)}


def test_token_created_by_admin_cannot_kill_alices_job(auth_cli: AuthCli) -> None:
    created = auth_cli("token", "create", "--user", "bob", "--role", "user", token=ADMIN_TOKEN)
    assert created.returncode == 0, str(created)
    bob_token = created.stdout.strip()
    auth_cli.outputs.remove(created.stdout)  # the one output whose purpose is to show a token
    submitted = auth_cli(
        "run", "--no-wait", "--name", "alice-sleeps", "--", "sleep", "300", token=ALICE_TOKEN
    )
    assert submitted.returncode == 0, str(submitted)

    refused = auth_cli("job", "kill", "/alice-sleeps", token=bob_token)
    killed = auth_cli("job", "kill", "/alice-sleeps", token=ALICE_TOKEN)

    assert refused.returncode == 1
    assert (
        "permission denied: cannot kill /alice-sleeps: it belongs to user alice, not to bob" in refused.stderr
    )
    assert killed.returncode == 0, str(killed)


def test_user_cannot_create_tokens(auth_cli: AuthCli) -> None:
    result = auth_cli("token", "create", "--user", "mallory", "--role", "admin", token=ALICE_TOKEN)

    assert result.returncode == 1
    assert "CreateToken needs the admin role" in result.stderr


def test_rpc_sends_the_token_and_without_one_is_refused(auth_cli: AuthCli, tmp_path: Path) -> None:
    # A config home of its own: the module's token file, once `iris login` wrote it, would be sent.
    no_token = {"XDG_CONFIG_HOME": str(tmp_path), "IRIS_TOKEN": ""}
    refused = auth_cli.cluster.runner(
        "rpc", "ControllerService", "ListJobs", "--config", str(auth_cli.cluster.path), env=no_token
    )
    allowed = auth_cli("rpc", "ControllerService", "ListJobs", token=ALICE_TOKEN)

    assert refused.returncode == 1 and "ListJobs failed: unauthenticated" in refused.stderr
    assert allowed.returncode == 0, str(allowed)
    assert "jobs" in json.loads(allowed.stdout) or json.loads(allowed.stdout) == {}


def test_no_token_appears_in_any_output_log_or_state_file(auth_cli: AuthCli) -> None:
    failed = auth_cli(
        "run", "--name", "alice-fails", "--", "sh", "-c", "echo failing >&2; exit 3", token=ALICE_TOKEN
    )
    assert failed.returncode == 3, str(failed)
    for args in (
        ("job", "status", "/alice-fails", "--json"),
        ("job", "logs", "/alice-fails"),
        ("cluster", "status", "--json"),
    ):
        assert auth_cli(*args, token=ADMIN_TOKEN).returncode == 0
    auth_cli("job", "kill", "/alice-fails", token="a.b.c")

    secrets = (ADMIN_TOKEN, ALICE_TOKEN, SESSION_TOKEN_PREFIX)
    leaks = [f"output {i}" for i, text in enumerate(auth_cli.outputs) for s in secrets if s in text]
    for path in sorted(p for p in auth_cli.cluster.state_dir.rglob("*") if p.is_file()):
        if path.name == "jwt_hmac.key":
            continue
        data = path.read_bytes()
        leaks += [f"{path} holds {s[:8]}..." for s in secrets if s.encode() in data]

    assert not leaks, leaks
