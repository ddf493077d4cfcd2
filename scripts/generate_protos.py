"""Regenerate src/iris/rpc/*_pb2.py, *_pb2.pyi and *_connect.py from the .proto files.

Run: uv run python scripts/generate_protos.py [--check]
With --check nothing is written; the exit status is 1 when the committed code is stale.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
RPC_DIR = SRC / "iris" / "rpc"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_connect.py")


def _plugin_path() -> str:
    plugin = shutil.which("protoc-gen-connectrpc") or str(Path(sys.executable).parent / "protoc-gen-connectrpc")
    if not Path(plugin).exists():
        raise SystemExit("protoc-gen-connectrpc not found: install the dev dependencies (uv sync)")
    return plugin


def generate_into(out_dir: Path) -> list[Path]:
    """Run protoc over every .proto in the rpc package, writing the package tree under out_dir."""
    protos = sorted(RPC_DIR.glob("*.proto"))
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{SRC}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--plugin=protoc-gen-connectrpc={_plugin_path()}",
        f"--connectrpc_out={out_dir}",
        "--connectrpc_opt=protobuf=google",
        *[str(p.relative_to(SRC)) for p in protos],
    ]
    subprocess.run(cmd, check=True)
    return sorted(p for p in (out_dir / "iris" / "rpc").iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate_into(Path(tmp))
        stale = []
        for path in generated:
            target = RPC_DIR / path.name
            if not target.exists() or target.read_bytes() != path.read_bytes():
                stale.append(target.name)
                if not args.check:
                    shutil.copyfile(path, target)
        expected = {p.name for p in generated}
        extra = [p.name for p in RPC_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES) and p.name not in expected]
    if args.check:
        if stale or extra:
            print(f"generated protobuf code is stale: {', '.join(stale + extra)}; run scripts/generate_protos.py")
            return 1
        print("generated protobuf code is up to date")
        return 0
    for name in extra:
        (RPC_DIR / name).unlink()
    print(f"regenerated {len(stale)} file(s)" if stale else "nothing to regenerate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
