"""Byte-level access to bundle and log storage through fsspec (file://, s3://, gs://).

Every failure surfaces as `StorageError` with a message that names the URI and says what to fix:
a missing bucket, an unreachable endpoint, or denied credentials. Cloud SDKs are imported lazily so
that a deployment on one cloud never needs the other cloud's packages.

Configuration comes from the environment, so the controller, workers and task pods all resolve a
URI the same way:
- S3: `AWS_ENDPOINT_URL` (e.g. CoreWeave or a local moto server), or `FSSPEC_S3` holding a JSON
  object of `s3fs.S3FileSystem` keyword arguments (e.g. '{"endpoint_url": "http://127.0.0.1:5000"}');
  keys in `FSSPEC_S3` win. Credentials follow the usual AWS variables and files.
- GCS: `STORAGE_EMULATOR_HOST` points gcsfs at an emulator, which is accessed anonymously;
  otherwise gcsfs discovers Google credentials as usual.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_GCS_DEFAULT_ENDPOINT = "https://storage.googleapis.com"
_S3_DEFAULT_ENDPOINT = "https://s3.amazonaws.com"

# botocore's defaults retry a refused connection for many seconds; a bundle upload or download that
# cannot connect should fail fast with a message instead of stalling a submit or a task start.
_S3_CLIENT_CONFIG: dict[str, Any] = {
    "connect_timeout": 5,
    "read_timeout": 60,
    "retries": {"max_attempts": 3, "mode": "standard"},
}
_CONNECT_PROBE_TIMEOUT_SECONDS = 5.0
# fsspec caches directory listings per filesystem instance forever by default, which would hide
# objects written by another process (a bundle the controller stored after a worker looked).
_NO_LISTINGS_CACHE: dict[str, Any] = {"use_listings_cache": False}

_OBJECT_STORE_SCHEMES = frozenset({"s3", "gs"})
_SCHEME_ALIASES = {"s3a": "s3", "gcs": "gs"}


class StorageError(RuntimeError):
    """A storage operation failed; the message names the URI and the likely fix."""


class StorageNotFoundError(StorageError):
    """The object (or the bucket holding it) does not exist."""


def _split_scheme(uri: str) -> tuple[str, str]:
    """Return (canonical scheme, rest) with plain absolute paths mapped to ("file", path)."""
    if "://" not in uri:
        if not os.path.isabs(uri):
            raise StorageError(
                f"storage location {uri!r} is neither an absolute path nor a URI; "
                "use an absolute path, file:///path, s3://bucket/prefix or gs://bucket/prefix"
            )
        return "file", uri
    scheme, rest = uri.split("://", 1)
    scheme = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    if scheme == "file" and not rest.startswith("/"):
        raise StorageError(f"file URI {uri!r} must hold an absolute path, e.g. file:///var/cache/iris")
    return scheme, rest


def _is_object_store(scheme: str) -> bool:
    return scheme in _OBJECT_STORE_SCHEMES


def _bucket_of(rest: str) -> str:
    return rest.split("/", 1)[0]


def _s3_options() -> dict[str, Any]:
    options: dict[str, Any] = {"config_kwargs": dict(_S3_CLIENT_CONFIG), **_NO_LISTINGS_CACHE}
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_url"] = endpoint
    raw = os.environ.get("FSSPEC_S3")
    if raw:
        try:
            overrides = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise StorageError(
                f"FSSPEC_S3 is not valid JSON ({exc}); expected an object of s3fs options"
            ) from None
        if not isinstance(overrides, dict):
            raise StorageError(f"FSSPEC_S3 must be a JSON object of s3fs options, got {raw!r}")
        config = {**options["config_kwargs"], **overrides.pop("config_kwargs", {})}
        options.update(overrides)
        options["config_kwargs"] = config
    return options


def _s3_endpoint(options: dict[str, Any]) -> str:
    return (
        options.get("endpoint_url")
        or options.get("client_kwargs", {}).get("endpoint_url")
        or _S3_DEFAULT_ENDPOINT
    )


def _gcs_emulator_endpoint() -> str | None:
    host = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if host in ("", "default"):
        return None
    return host if host.startswith(("http://", "https://")) else f"http://{host}"


def _gcs_endpoint() -> str:
    return _gcs_emulator_endpoint() or _GCS_DEFAULT_ENDPOINT


def _import_gcsfs_core() -> Any:
    # gcsfs defaults to an "extended" filesystem that probes every bucket for zonal/HNS features
    # over gRPC, which emulators and ordinary buckets do not need; the switch is read at import.
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    import gcsfs.core

    return gcsfs.core


def _endpoint_for(scheme: str) -> str | None:
    if scheme == "s3":
        return _s3_endpoint(_s3_options())
    if scheme == "gs":
        return _gcs_endpoint()
    return None


def filesystem_for(uri: str) -> tuple[AbstractFileSystem, str]:
    """Return the fsspec filesystem serving `uri` and the path to pass to it."""
    # fsspec is imported on first use: local files are read and written without it, and a
    # controller or worker that only ever sees file:// URIs starts without paying for it.
    import fsspec

    scheme, rest = _split_scheme(uri)
    if scheme == "file":
        return fsspec.filesystem("file"), rest
    if scheme == "s3":
        import s3fs

        return s3fs.S3FileSystem(**_s3_options()), rest
    if scheme == "gs":
        gcsfs_core = _import_gcsfs_core()
        emulator = _gcs_emulator_endpoint()
        # The emulator ignores credentials, and looking them up can stall on the metadata server.
        credentials: dict[str, Any] = {"endpoint_url": emulator, "token": "anon"} if emulator else {}
        return gcsfs_core.GCSFileSystem(**credentials, **_NO_LISTINGS_CACHE), rest
    fs = fsspec.filesystem(scheme)
    return fs, fs._strip_protocol(uri)


def join_uri(prefix: str, name: str) -> str:
    """Append `name` to `prefix` with exactly one separator, keeping the prefix's scheme."""
    return f"{prefix.rstrip('/')}/{name.lstrip('/')}"


def _probe_gcs_endpoint() -> None:
    """Fail fast when the GCS endpoint refuses connections.

    gcsfs retries connection failures six times with exponential backoff (over 30 s) and offers no
    way to bound it, so a dead endpoint is detected with one TCP connect before each operation.
    """
    endpoint = urlsplit(_gcs_endpoint())
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    with socket.create_connection((endpoint.hostname, port), timeout=_CONNECT_PROBE_TIMEOUT_SECONDS):
        pass


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        # aiohttp keeps the underlying socket error in `os_error` rather than chaining it.
        os_error = getattr(current, "os_error", None)
        current = current.__cause__ or current.__context__
        if current is None and isinstance(os_error, BaseException):
            current = os_error
    return chain


def _connection_failure(exc: BaseException) -> str | None:
    """Describe why the endpoint could not be reached, or None when the failure is something else."""
    chain = _exception_chain(exc)
    for link in chain:
        if isinstance(link, socket.gaierror):
            return f"host name could not be resolved ({link.strerror or link})"
        if isinstance(link, ConnectionRefusedError):
            return "connection refused"
        if isinstance(link, (socket.timeout, TimeoutError)):
            return "timed out"
        if isinstance(link, ConnectionError) or (
            isinstance(link, OSError) and link.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)
        ):
            return (link.strerror or str(link)).lower()
    for link in chain:
        # botocore and aiohttp connection errors do not derive from OSError.
        name = type(link).__name__
        if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"):
            return str(link)
    return None


def _bucket_exists(scheme: str, rest: str) -> bool | None:
    """True/False when the store can tell, None when asking failed too."""
    try:
        fs, _ = filesystem_for(f"{scheme}://{rest}")
        return bool(fs.exists(_bucket_of(rest)))
    except Exception:
        return None


_PERMISSION_HINTS = {
    "s3": "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or the AWS profile) and the bucket policy",
    "gs": "check GOOGLE_APPLICATION_CREDENTIALS and the bucket's IAM roles",
}


def _storage_error(action: str, uri: str, exc: BaseException, *, writing: bool) -> StorageError:
    scheme, rest = _split_scheme(uri)
    prefix = f"cannot {action} {uri}"
    if _is_object_store(scheme):
        unreachable = _connection_failure(exc)
        if unreachable is not None:
            return StorageError(
                f"{prefix}: could not reach the storage endpoint {_endpoint_for(scheme)}: {unreachable}"
            )
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        # An object store answers "not found" to a write only when the bucket is missing.
        if _is_object_store(scheme) and (writing or _bucket_exists(scheme, rest) is False):
            return StorageNotFoundError(
                f"{prefix}: bucket {_bucket_of(rest)!r} does not exist (create it or fix the bucket name)"
            )
        return StorageNotFoundError(f"{prefix}: it does not exist")
    if isinstance(exc, PermissionError):
        hint = _PERMISSION_HINTS.get(scheme, "check the permissions of the path")
        return StorageError(f"{prefix}: permission denied ({exc}); {hint}")
    return StorageError(f"{prefix}: {type(exc).__name__}: {exc}")


def read_bytes(uri: str, *, what: str = "object") -> bytes:
    """Return the whole object at `uri`; `what` names it in error messages ("bundle", "log")."""
    scheme, rest = _split_scheme(uri)
    try:
        if scheme == "file":
            return Path(rest).read_bytes()
        if scheme == "gs":
            _probe_gcs_endpoint()
        fs, path = filesystem_for(uri)
        return fs.cat_file(path)
    except StorageError:
        raise
    except Exception as exc:
        raise _storage_error(f"read {what} from", uri, exc, writing=False) from exc


def write_bytes_atomic(uri: str, data: bytes, *, what: str = "object") -> None:
    """Store `data` at `uri` so that readers see either the old object or all of the new one.

    Local files are written under a temporary name in the same directory and renamed into place;
    object stores make single-request uploads visible atomically already.
    """
    scheme, rest = _split_scheme(uri)
    try:
        if scheme == "file":
            _write_local_atomic(Path(rest), data)
            return
        if scheme == "gs":
            _probe_gcs_endpoint()
        fs, path = filesystem_for(uri)
        fs.pipe_file(path, data)
    except StorageError:
        raise
    except Exception as exc:
        raise _storage_error(f"write {what} to", uri, exc, writing=True) from exc


def _write_local_atomic(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, 0o644)
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def exists(uri: str, *, what: str = "object") -> bool:
    """True when an object exists at `uri`."""
    scheme, rest = _split_scheme(uri)
    try:
        if scheme == "file":
            return os.path.exists(rest)
        if scheme == "gs":
            _probe_gcs_endpoint()
        fs, path = filesystem_for(uri)
        return bool(fs.exists(path))
    except StorageError:
        raise
    except Exception as exc:
        raise _storage_error(f"check for {what} at", uri, exc, writing=False) from exc
