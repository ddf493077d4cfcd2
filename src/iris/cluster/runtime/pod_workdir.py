"""The task Pod's side of its workdir: an emptyDir at /app that lives and dies with the Pod.

Run inside the Pod as `python3 -m iris.cluster.runtime.pod_workdir COMMAND ...` (from an image with
iris installed: the worker's):

- `fill APP [--bundle URI --sha256 HEX] [--files ZIP]`: the init container. Fetches the job bundle
  through fsspec (file://, s3://, gs://: `iris.storage`, with the credentials and endpoints the Pod's
  env carries), checks its digest and unpacks it into APP, then unpacks the files the worker wrote
  beside it (the callable, inputs), delivered as a zip in a ConfigMap. Finally it stamps APP so
  that what the task changes afterwards can be told apart.
- `hold`: the Pod's `workdir` container. Keeps the emptyDir reachable after the task ended so the
  worker can collect what it wrote; exits on SIGTERM.
- `collect APP`: run by the worker through exec in the `workdir` container. Writes a zip of every
  file under APP changed since the stamp to stdout, base64-encoded (exec streams carry text).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import shutil
import signal
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from iris.bundle_format import COPY_CHUNK_BYTES, extract_bundle, validate_digest, zip_entry

# Lives in the emptyDir: the main container waits for START before running the task's command.
STATE_DIRNAME = ".iris-pod"
FILLED_NAME = "filled"
START_NAME = "start"


def fill(app: Path, bundle_uri: str, sha256: str, files_zip: Path | None) -> int:
    """Materialise the workdir; returns how many files were written."""
    app.mkdir(parents=True, exist_ok=True)
    written = 0
    if bundle_uri:
        from iris import storage

        validate_digest(sha256)
        try:
            data = storage.read_bytes(bundle_uri, what="bundle")
        except storage.StorageError as exc:
            # The runtime reports the init container's last lines: keep the reason on one.
            raise SystemExit(str(exc)) from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise SystemExit(f"bundle {bundle_uri} hashes to {actual}, not {sha256}: resubmit the job")
        written += extract_bundle(data, app)
    if files_zip is not None:
        written += extract_bundle(files_zip.read_bytes(), app)
    state = app / STATE_DIRNAME
    state.mkdir(exist_ok=True)
    (state / FILLED_NAME).touch()
    return written


def zip_tree(root: Path, include: Callable[[Path], bool] = lambda path: True) -> bytes:
    """A zip of the regular files under `root` that `include` accepts; empty bytes if there are none."""
    paths = sorted(
        path for path in root.rglob("*") if path.is_file() and not path.is_symlink() and include(path)
    )
    if not paths:
        return b""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in paths:
            info = zip_entry(path.relative_to(root).as_posix(), path.stat().st_size, os.access(path, os.X_OK))
            with path.open("rb") as source, archive.open(info, "w") as sink:
                shutil.copyfileobj(source, sink, COPY_CHUNK_BYTES)
    return buffer.getvalue()


def collect(app: Path) -> bytes:
    """A zip of the files under `app` the task wrote or changed after `fill` finished."""
    state = app / STATE_DIRNAME
    since = (state / FILLED_NAME).stat().st_mtime_ns
    return zip_tree(app, lambda path: state not in path.parents and path.stat().st_mtime_ns > since)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pod_workdir")
    commands = parser.add_subparsers(dest="command", required=True)
    fill_parser = commands.add_parser("fill")
    fill_parser.add_argument("app", type=Path)
    fill_parser.add_argument("--bundle", default="")
    fill_parser.add_argument("--sha256", default="")
    fill_parser.add_argument("--files", type=Path)
    commands.add_parser("hold")
    collect_parser = commands.add_parser("collect")
    collect_parser.add_argument("app", type=Path)
    args = parser.parse_args(argv)
    if args.command == "fill":
        written = fill(args.app, args.bundle, args.sha256, args.files)
        print(f"materialised {written} files in {args.app}", flush=True)
    elif args.command == "hold":
        # As PID 1 the default action of SIGTERM would be ignored: wait for it explicitly.
        stop = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
    else:
        sys.stdout.write(base64.b64encode(collect(args.app)).decode())
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
