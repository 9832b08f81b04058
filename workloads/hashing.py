"""SHA-256 of a file, read in chunks (dataset shards and checkpoint files are too large to
read whole), and of a manifest's content."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHUNK = 8 << 20  # bytes read at a time


def file_sha256(path: str | Path) -> str:
    """A regular file's hash. A FIFO or a device (a shard named `*.bin` that is one) is
    refused before it is opened: opening a FIFO waits for a writer forever, and a device
    never ends."""
    digest = hashlib.sha256()
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{path}: not a regular file")
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def content_id(body: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of `body` as canonical JSON (sorted keys, no spaces): a manifest's id,
    the same for the same content however it was written."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return f"sha256:{hashlib.sha256(canonical).hexdigest()}"
