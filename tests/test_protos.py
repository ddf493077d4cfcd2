import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_generated_protobuf_code_matches_the_proto_files():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "generate_protos.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout
