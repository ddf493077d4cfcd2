"""Where a client finds its bearer token, and how it sends it.

In order: a token given in code (`IrisClient(url, token=...)`), the `IRIS_TOKEN` environment
variable (set for every task when auth is on), then the token file `iris login` writes
(`IRIS_TOKEN_FILE`, else `$XDG_CONFIG_HOME/iris/token`, else `~/.config/iris/token`). No token
at all is fine: a cluster with auth off needs none.
"""

from __future__ import annotations

import os
from pathlib import Path

from iris.cluster import task_env

TOKEN_FILE_ENV = "IRIS_TOKEN_FILE"


def token_file_path() -> Path:
    explicit = os.environ.get(TOKEN_FILE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "iris" / "token"


def resolve_token(explicit: str | None = None) -> str:
    """The token this client sends, from the first source that has one; "" for none."""
    if explicit:
        return explicit.strip()
    from_env = os.environ.get(task_env.TOKEN, "").strip()
    if from_env:
        return from_env
    path = token_file_path()
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise OSError(f"cannot read the token file {path}: {exc.strerror or exc}") from None


def save_token(token: str) -> Path:
    """Writes the token file, readable by its owner only; returns its path."""
    path = token_file_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def bearer_header(token: str) -> dict[str, str]:
    """The header that carries `token`; none without one."""
    return {"authorization": f"Bearer {token}"} if token else {}
