"""A cache entry's manifest: written when an entry is built, and checked before an entry is used.

Why a module of its own: what makes an entry trustworthy is the manifest, not the directory it sits in, and its
checks are many (each a way an entry went bad in practice); the cache (core/cache.py) only asks "valid or why not".

Checks (``verify_entry``): the manifest must be a JSON object whose ``key`` hashes to the directory's
name (an entry copied over another's directory is caught, and the differing fields are named), whose
``files`` is a non-empty object of ``{"bytes": int, "sha256": hex}``, and every file must match. Any
failure is ``CacheEntryCorrupt`` with the reason; ``ArtifactCache.get_or_build`` reports it and rebuilds.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from core.hashing import canonical_json, digest, file_sha256

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 2  # 2: "key" is exactly the addressed object, "label" sits beside it
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class CacheEntryCorrupt(Exception):
    """An entry exists but its manifest or files do not match (truncated write, edited file, wrong key...)."""


def _write_manifest(directory: Path, key: Any, label: str) -> None:
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        files[rel] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    if not files:
        raise RuntimeError(f"cache build for {label} wrote no files into {directory}")
    if MANIFEST in files:
        raise RuntimeError(f"cache build for {label} wrote {MANIFEST}, a name the cache reserves, into {directory}")
    manifest = {"format": MANIFEST_FORMAT, "key": key, "label": label, "files": files, "created": time.time()}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def verify_entry(directory: Path, expected_key: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Check the manifest's key and every file; raise CacheEntryCorrupt naming the first problem.

    ``expected_key`` (``{"kind": kind, **parts}``), when given, lets a key mismatch name the fields
    that differ; without it the mismatch is still caught (the key must hash to the directory's name).
    """
    directory = Path(directory)
    try:
        text = (directory / MANIFEST).read_text()
    except FileNotFoundError as exc:
        raise CacheEntryCorrupt(f"{directory}: no {MANIFEST} (unreadable manifest)") from exc
    except OSError as exc:
        raise CacheEntryCorrupt(f"{directory}: unreadable manifest ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise CacheEntryCorrupt(f"{directory}: unreadable manifest, not UTF-8 text ({exc})") from exc
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise CacheEntryCorrupt(f"{directory}: unreadable manifest, not JSON ({exc})") from exc
    if not isinstance(manifest, dict):
        raise CacheEntryCorrupt(f"{directory}: manifest is a JSON {_json_type(manifest)}, not an object")
    _check_key(directory, manifest, expected_key)
    files = manifest.get("files")
    if not isinstance(files, dict):
        what = "missing" if "files" not in manifest else f"a JSON {_json_type(files)}, not an object"
        raise CacheEntryCorrupt(f"{directory}: manifest files is {what}")
    if not files:
        raise CacheEntryCorrupt(f"{directory}: manifest lists no files (an entry has at least one)")
    for rel, meta in files.items():
        _check_file_meta(directory, rel, meta)
    for rel, meta in files.items():
        path = directory / rel
        if not path.is_file():
            raise CacheEntryCorrupt(f"{directory}: missing file {rel}")
        size = path.stat().st_size
        if size != meta["bytes"]:
            raise CacheEntryCorrupt(f"{directory}: {rel} has {size} bytes, manifest says {meta['bytes']}")
        if file_sha256(path) != meta["sha256"]:
            raise CacheEntryCorrupt(f"{directory}: {rel} checksum mismatch")
    return dict(manifest)


def _check_key(directory: Path, manifest: dict[str, Any], expected_key: Mapping[str, Any] | None) -> None:
    if "key" not in manifest:
        raise CacheEntryCorrupt(f"{directory}: manifest has no key")
    recorded = manifest["key"]
    if "format" not in manifest and isinstance(recorded, dict):
        # Written before format 2, which stored the label inside the key; the label is not addressed.
        recorded = {k: v for k, v in recorded.items() if k != "label"}
    if digest(recorded) == directory.name:
        return
    where = f"{directory}: manifest key belongs to another entry ({digest(recorded)[:12]}...)"
    if expected_key is None:
        raise CacheEntryCorrupt(f"{where}: {_short(recorded, 200)}")
    wanted = json.loads(canonical_json(expected_key))
    raise CacheEntryCorrupt(f"{where}; differs in {_key_differences(recorded, wanted)}")


def _check_file_meta(directory: Path, rel: str, meta: Any) -> None:
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or ".." in parts or rel == MANIFEST:
        raise CacheEntryCorrupt(f"{directory}: manifest lists file {rel!r}, which is not a file inside the entry")
    if not isinstance(meta, dict):
        raise CacheEntryCorrupt(f"{directory}: manifest entry of {rel} is a JSON {_json_type(meta)}, not an object")
    size, sha = meta.get("bytes"), meta.get("sha256")
    if "bytes" not in meta or isinstance(size, bool) or not isinstance(size, int) or size < 0:
        shown = "missing" if "bytes" not in meta else repr(size)
        raise CacheEntryCorrupt(f"{directory}: manifest bytes of {rel} is {shown}, not a byte count")
    if not isinstance(sha, str) or not _SHA256_RE.match(sha):
        shown = "missing" if "sha256" not in meta else _short(sha, 80)
        raise CacheEntryCorrupt(f"{directory}: manifest sha256 of {rel} is {shown}, not a hex SHA-256")


def _key_differences(recorded: Any, expected: Any, limit: int = 4) -> str:
    """'precision (manifest 'fp32', wanted 'int8'), ...': the fields that tell the two keys apart."""
    diffs: list[str] = []
    _diff(recorded, expected, "", diffs)
    if not diffs:
        return "no field, yet its digest differs (a key that changes when stored as JSON)"
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return ", ".join(diffs[:limit]) + more


_ABSENT = object()


def _diff(mine: Any, wanted: Any, path: str, out: list[str]) -> None:
    if isinstance(mine, dict) and isinstance(wanted, dict):
        for k in sorted(set(mine) | set(wanted)):
            _diff(mine.get(k, _ABSENT), wanted.get(k, _ABSENT), f"{path}.{k}" if path else k, out)
    elif mine != wanted or type(mine) is not type(wanted):
        show = lambda v: "absent" if v is _ABSENT else _short(v, 60)
        out.append(f"{path or 'the whole key'} (manifest {show(mine)}, wanted {show(wanted)})")


def _short(value: Any, width: int) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")
