"""Where a client finds its token, in the documented order, and how `iris login` stores it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from iris.client.credentials import resolve_token, save_token, token_file_path


@pytest.fixture(autouse=True)
def private_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("IRIS_TOKEN", raising=False)
    monkeypatch.delenv("IRIS_TOKEN_FILE", raising=False)
    return tmp_path / "config"


def test_token_given_in_code_wins_over_env_and_file(monkeypatch: pytest.MonkeyPatch) -> None:
    save_token("from-file")
    monkeypatch.setenv("IRIS_TOKEN", "from-env")

    assert resolve_token("from-code") == "from-code"


def test_env_token_wins_over_the_token_file(monkeypatch: pytest.MonkeyPatch) -> None:
    save_token("from-file")
    monkeypatch.setenv("IRIS_TOKEN", "from-env")

    assert resolve_token() == "from-env"


def test_token_file_is_read_when_nothing_else_gives_a_token() -> None:
    save_token("from-file")

    assert resolve_token() == "from-file"


def test_no_token_anywhere_is_empty() -> None:
    assert resolve_token() == ""


def test_saved_token_file_is_owner_only_under_the_config_home(private_config_home: Path) -> None:
    path = save_token("secret")

    assert path == private_config_home / "iris" / "token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_iris_token_file_names_another_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_TOKEN_FILE", str(tmp_path / "cluster-a.token"))
    save_token("for-cluster-a")

    assert token_file_path() == tmp_path / "cluster-a.token"
    assert resolve_token() == "for-cluster-a"
