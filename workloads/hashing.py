"""SHA-256 of a file, read in chunks: dataset shards and checkpoint files are too large to
read whole."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 8 << 20  # bytes read at a time


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
