from __future__ import annotations

import io
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from iris.bundle_format import DEFAULT_MAX_BUNDLE_BYTES, UnsafeBundleError, extract_bundle
from iris.client.bundle import BundleTooLargeError, WorkspaceBundles, build_bundle


def write(root: Path, relative: str, content: str | bytes = "x") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def bundled_names(workspace: Path, **kwargs: int) -> set[str]:
    bundle = build_bundle(workspace, **kwargs)
    with zipfile.ZipFile(io.BytesIO(bundle.blob)) as archive:
        return set(archive.namelist())


def test_build_bundle_root_gitignore_excludes_matching_files_and_dirs(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.log\nbuild/\n/only_at_root.txt\n")
    write(tmp_path, "main.py")
    write(tmp_path, "run.log")
    write(tmp_path, "sub/deep.log")
    write(tmp_path, "build/out.bin")
    write(tmp_path, "only_at_root.txt")
    write(tmp_path, "sub/only_at_root.txt")

    assert bundled_names(tmp_path) == {".gitignore", "main.py", "sub/only_at_root.txt"}


def test_build_bundle_nested_gitignore_applies_relative_to_its_directory(tmp_path: Path) -> None:
    write(tmp_path, "pkg/.gitignore", "/local.txt\ndata/\n")
    write(tmp_path, "local.txt")
    write(tmp_path, "pkg/local.txt")
    write(tmp_path, "pkg/data/big.bin")
    write(tmp_path, "data/kept.bin")
    write(tmp_path, "pkg/code.py")

    assert bundled_names(tmp_path) == {"local.txt", "data/kept.bin", "pkg/.gitignore", "pkg/code.py"}


def test_build_bundle_gitignore_negation_reincludes_files(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.json\n!config.json\n")
    write(tmp_path, "sub/.gitignore", "!keep.json\n")
    write(tmp_path, "config.json")
    write(tmp_path, "results.json")
    write(tmp_path, "sub/keep.json")
    write(tmp_path, "sub/drop.json")

    assert bundled_names(tmp_path) == {".gitignore", "config.json", "sub/.gitignore", "sub/keep.json"}


def test_build_bundle_vcs_venv_and_bytecode_always_skipped(tmp_path: Path) -> None:
    write(tmp_path, "app.py")
    write(tmp_path, ".git/HEAD")
    write(tmp_path, ".venv/lib/site.py")
    write(tmp_path, "pkg/__pycache__/mod.cpython-311.pyc")
    write(tmp_path, "pkg/stray.pyc")
    write(tmp_path, ".iris/state")
    write(tmp_path, "pkg/mod.py")

    assert bundled_names(tmp_path) == {"app.py", "pkg/mod.py"}


def test_build_bundle_same_tree_has_same_hash_regardless_of_mtimes_and_location(tmp_path: Path) -> None:
    first = tmp_path / "first"
    write(first, "b.py", "print('b')")
    write(first, "a/z.txt", "z")
    write(first, "a/y.txt", "y")
    original = build_bundle(first)

    for path in first.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    second = tmp_path / "second"
    # Created in a different order, somewhere else, with fresh mtimes.
    write(second, "a/y.txt", "y")
    write(second, "b.py", "print('b')")
    write(second, "a/z.txt", "z")

    assert build_bundle(first).sha256 == original.sha256
    assert build_bundle(second).sha256 == original.sha256
    assert build_bundle(first).blob == original.blob


def test_build_bundle_changed_content_changes_hash(tmp_path: Path) -> None:
    write(tmp_path, "main.py", "v1")
    before = build_bundle(tmp_path)
    write(tmp_path, "main.py", "v2")

    assert build_bundle(tmp_path).sha256 != before.sha256


def test_build_bundle_reports_file_count_and_size(tmp_path: Path) -> None:
    write(tmp_path, "a.py")
    write(tmp_path, "b/c.py")

    bundle = build_bundle(tmp_path)

    assert bundle.file_count == 2
    assert bundle.size_bytes == len(bundle.blob)


def test_build_bundle_oversized_workspace_message_lists_largest_entries(tmp_path: Path) -> None:
    write(tmp_path, "checkpoints/model.bin", b"\0" * 6000)
    write(tmp_path, "data/part1.csv", b"\0" * 3000)
    write(tmp_path, "data/part2.csv", b"\0" * 2500)
    write(tmp_path, "main.py", b"\0" * 10)

    with pytest.raises(BundleTooLargeError) as caught:
        build_bundle(tmp_path, max_bytes=4096)

    message = str(caught.value)
    assert "11.2 KiB" in message  # the total
    assert "4.0 KiB bundle limit" in message
    assert "checkpoints/model.bin" in message
    assert "data/" in message
    assert "data/part1.csv" in message
    assert ".gitignore" in message
    # A directory holding one file adds nothing next to that file.
    assert "checkpoints/ " not in message
    assert message.index("checkpoints/model.bin") < message.index("data/part1.csv")


def test_build_bundle_default_limit_is_64_mib() -> None:
    assert DEFAULT_MAX_BUNDLE_BYTES == 64 * 1024 * 1024


def test_build_bundle_symlink_outside_workspace_not_followed(tmp_path: Path) -> None:
    outside = write(tmp_path, "secrets/key.pem", "secret")
    workspace = tmp_path / "ws"
    write(workspace, "main.py")
    write(workspace, "lib/helper.py", "helper")
    (workspace / "key.pem").symlink_to(outside)
    (workspace / "secrets").symlink_to(outside.parent, target_is_directory=True)
    (workspace / "helper_link.py").symlink_to(workspace / "lib/helper.py")
    (workspace / "lib/loop").symlink_to(workspace / "lib", target_is_directory=True)
    (workspace / "lib/up").symlink_to(workspace, target_is_directory=True)

    bundle = build_bundle(workspace)

    with zipfile.ZipFile(io.BytesIO(bundle.blob)) as archive:
        assert set(archive.namelist()) == {"main.py", "lib/helper.py", "helper_link.py"}
        assert archive.read("helper_link.py") == b"helper"


def test_build_bundle_nonexistent_workspace_raises_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"

    with pytest.raises(FileNotFoundError, match=f"workspace {missing} does not exist"):
        build_bundle(missing)


def test_build_bundle_workspace_that_is_a_file_raises_clear_error(tmp_path: Path) -> None:
    file = write(tmp_path, "train.py")

    with pytest.raises(NotADirectoryError, match=f"workspace {file} is not a directory"):
        build_bundle(file)


def test_build_bundle_empty_workspace_gives_valid_empty_bundle(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path)

    assert bundle.file_count == 0
    assert extract_bundle(bundle.blob, tmp_path / "out") == 0
    assert list((tmp_path / "out").iterdir()) == []


def test_extract_bundle_round_trip_preserves_content_and_executable_bit(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    script = write(workspace, "bin/run.sh", "#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    write(workspace, "data/table.csv", "a,b\n").chmod(0o600)

    dest = tmp_path / "out"
    count = extract_bundle(build_bundle(workspace).blob, dest)

    assert count == 2
    assert (dest / "bin/run.sh").read_text() == "#!/bin/sh\necho hi\n"
    assert os.access(dest / "bin/run.sh", os.X_OK)
    assert not os.access(dest / "data/table.csv", os.X_OK)
    assert (dest / "data/table.csv").read_text() == "a,b\n"


def test_extract_bundle_accepts_zip_path(tmp_path: Path) -> None:
    write(tmp_path / "ws", "main.py", "print(1)")
    zip_path = tmp_path / "bundle.zip"
    zip_path.write_bytes(build_bundle(tmp_path / "ws").blob)

    extract_bundle(zip_path, tmp_path / "out")

    assert (tmp_path / "out/main.py").read_text() == "print(1)"


def _zip_with(names: list[str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, "payload")
    return buffer.getvalue()


@pytest.mark.parametrize("evil", ["../escaped.txt", "a/../../escaped.txt", "/tmp/iris-zip-slip-escaped.txt"])
def test_extract_bundle_entry_escaping_dest_is_refused(tmp_path: Path, evil: str) -> None:
    dest = tmp_path / "work" / "dest"
    blob = _zip_with(["fine.txt", evil])

    with pytest.raises(UnsafeBundleError, match="refusing to extract"):
        extract_bundle(blob, dest)

    assert not (tmp_path / "work" / "escaped.txt").exists()
    assert not Path("/tmp/iris-zip-slip-escaped.txt").exists()
    # Checked up front: a bad bundle leaves nothing behind, not even its harmless entries.
    assert not (dest / "fine.txt").exists()


def test_extract_bundle_does_not_write_through_symlinked_directory_in_dest(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "linked").symlink_to(outside, target_is_directory=True)

    with pytest.raises(UnsafeBundleError):
        extract_bundle(_zip_with(["linked/owned.txt"]), dest)

    assert list(outside.iterdir()) == []


def test_extract_bundle_replaces_symlinked_file_instead_of_following_it(tmp_path: Path) -> None:
    victim = write(tmp_path, "victim.txt", "original")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "config.txt").symlink_to(victim)

    extract_bundle(_zip_with(["config.txt"]), dest)

    assert victim.read_text() == "original"
    assert not (dest / "config.txt").is_symlink()
    assert (dest / "config.txt").read_text() == "payload"


def test_extract_bundle_overwrites_previous_extraction(tmp_path: Path) -> None:
    write(tmp_path / "ws", "main.py", "v1")
    dest = tmp_path / "out"
    extract_bundle(build_bundle(tmp_path / "ws").blob, dest)
    shutil.rmtree(tmp_path / "ws")
    write(tmp_path / "ws", "main.py", "v2")

    extract_bundle(build_bundle(tmp_path / "ws").blob, dest)

    assert (dest / "main.py").read_text() == "v2"


def _contents(blob: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_workspace_bundles_settled_workspace_is_zipped_once_and_again_after_each_change(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "print('v1')")
    write(tmp_path, "data/config.yaml", "lr: 0.1")
    bundles = WorkspaceBundles(settled_ns=0)  # every file counts as settled

    first = bundles.build(tmp_path)
    assert bundles.build(tmp_path) is first
    assert first == build_bundle(tmp_path)

    write(tmp_path, "train.py", "print('version 2')")
    grown = bundles.build(tmp_path)
    assert _contents(grown.blob)["train.py"] == b"print('version 2')"
    write(tmp_path, "notes.txt", "new file")
    added = bundles.build(tmp_path)
    assert "notes.txt" in _contents(added.blob)
    write(tmp_path, ".gitignore", "data/\n")
    ignored = bundles.build(tmp_path)
    assert "data/config.yaml" not in _contents(ignored.blob)
    assert len({first.sha256, grown.sha256, added.sha256, ignored.sha256}) == 4


def test_workspace_bundles_file_rewritten_just_after_a_build_with_the_same_size_is_seen(tmp_path: Path) -> None:
    # Written within the same timestamp tick, a rewrite need not move the file's change time: a
    # workspace changed this recently is zipped again rather than trusted.
    write(tmp_path, "train.py", "lr = 0.1")
    bundles = WorkspaceBundles()
    bundles.build(tmp_path)
    write(tmp_path, "train.py", "lr = 0.2")

    assert _contents(bundles.build(tmp_path).blob)["train.py"] == b"lr = 0.2"
