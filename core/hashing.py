"""Hashing for cache keys and checksums: one canonical text of a nested key, and SHA-256 of keys, files and bytes.

Why a module of its own: an entry's address (``digest``), its manifest's checksums (``file_sha256``) and the data
sets' fingerprints (``bytes_sha256``, fixtures/data) must all hash the same way; nothing here touches the cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def canonical_json(parts: Any) -> str:
    """One stable text for a nested key (sorted keys, no whitespace), so equal keys hash equally."""
    return json.dumps(parts, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, bytes):
        return hashlib.sha256(obj).hexdigest()
    raise TypeError(f"cache key part of type {type(obj).__name__} is not hashable into a key: {obj!r}")


def digest(parts: Any) -> str:
    """Hex SHA-256 of a key's canonical JSON."""
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def bytes_sha256(chunks: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()
