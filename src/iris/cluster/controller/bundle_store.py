"""The controller's content-addressed bundle store: one `<prefix>/<sha256>.zip` per distinct bundle."""

from __future__ import annotations

import hashlib

from iris import chaos, storage
from iris.bundle_format import validate_digest


class BundleStore:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def uri_for(self, sha256: str) -> str:
        validate_digest(sha256)
        return storage.join_uri(self.prefix, f"{sha256}.zip")

    def exists(self, sha256: str) -> bool:
        return storage.exists(self.uri_for(sha256), what="bundle")

    def put(self, blob: bytes, sha256: str) -> str:
        """Store `blob` under its digest unless it is already there; returns its URI.

        Raises ValueError when `blob` does not hash to `sha256`, and StorageError when the store
        cannot be reached or written.
        """
        uri = self.uri_for(sha256)
        actual = hashlib.sha256(blob).hexdigest()
        if actual != sha256:
            raise ValueError(
                f"bundle digest mismatch: the client declared {sha256} but the {len(blob)} bytes received "
                f"hash to {actual}; the upload was corrupted or the client computed the digest wrongly"
            )
        chaos.maybe_fail(chaos.CONTROLLER_BUNDLE_UPLOAD, storage.StorageError)
        if not storage.exists(uri, what="bundle"):
            storage.write_bytes_atomic(uri, blob, what="bundle")
        return uri
