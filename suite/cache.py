"""Content-addressed artifact cache shared by fixtures (trained weights) and engines (ONNX, engines).

Why: a stale artifact silently reused after an upgrade is the worst failure a regression suite can
have, so an entry's address is a hash of *everything* that changes its content (the caller lists it),
every file is checksummed in a manifest, and a corrupt or truncated entry is detected and rebuilt.
Entries are built in a private temporary directory and moved into place with one atomic rename, so
an interrupted build never leaves a half-written entry behind, and two processes (pytest-xdist)
building the same entry both end up with a complete one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
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


class CacheEntryCorrupt(Exception):
    """An entry exists but its manifest or files do not match (truncated write, edited file...)."""


@dataclass
class CacheEvent:
    kind: str
    label: str
    key: str
    action: str  # "hit", "start" (a build begins), "build", "rebuild-corrupt"
    seconds: float = 0.0
    detail: str = ""


@dataclass
class CacheStats:
    hits: int = 0
    builds: int = 0
    build_seconds: float = 0.0
    events: list[CacheEvent] = field(default_factory=list)

    @property
    def corrupt_rebuilds(self) -> list[CacheEvent]:
        return [e for e in self.events if e.action == "rebuild-corrupt"]

    def summary_line(self) -> str:
        return f"engine cache: {self.hits} hits, {self.builds} builds, {self.build_seconds:.1f} s building"


class ArtifactCache:
    """Directory of immutable entries ``ROOT/KIND/KEY/`` each holding files plus a checksummed manifest."""

    def __init__(self, root: Path | str, on_event: Callable[[CacheEvent], None] | None = None) -> None:
        self.root = Path(root)
        self.stats = CacheStats()
        self._on_event = on_event

    def entry_dir(self, kind: str, parts: Mapping[str, Any]) -> Path:
        return self.root / kind / digest({"kind": kind, **parts})

    def get_or_build(
        self,
        kind: str,
        parts: Mapping[str, Any],
        build: Callable[[Path], None],
        label: str = "",
    ) -> Path:
        """Return the directory of a valid entry for ``parts``, building it with ``build(tmpdir)`` if needed.

        ``build`` writes its files into the directory it is given; on success they are checksummed and
        the directory is moved into place atomically. On failure nothing is left in the cache.
        """
        final = self.entry_dir(kind, parts)
        key = final.name
        label = label or kind
        action = "build"
        detail = ""
        if final.exists():
            try:
                verify_entry(final)
            except CacheEntryCorrupt as exc:
                action, detail = "rebuild-corrupt", str(exc)
                _remove(final)
            else:
                self.stats.hits += 1
                self._emit(CacheEvent(kind, label, key, "hit"))
                return final
        final.parent.mkdir(parents=True, exist_ok=True)
        if self._on_event is not None:
            self._on_event(CacheEvent(kind, label, key, "start", detail=detail))
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:12]}-{uuid.uuid4().hex[:8]}-", dir=final.parent))
        start = time.perf_counter()
        try:
            build(tmp)
            _write_manifest(tmp, {"kind": kind, "label": label, **parts})
            try:
                os.rename(tmp, final)
            except OSError:
                # Another process finished the same entry first; theirs is as good as ours.
                if not final.exists():
                    raise
                verify_entry(final)
                _remove(tmp)
        except BaseException:
            _remove(tmp)
            raise
        seconds = time.perf_counter() - start
        self.stats.builds += 1
        self.stats.build_seconds += seconds
        self._emit(CacheEvent(kind, label, key, action, seconds, detail))
        return final

    def _emit(self, event: CacheEvent) -> None:
        self.stats.events.append(event)
        if self._on_event is not None:
            self._on_event(event)


def _write_manifest(directory: Path, parts: Mapping[str, Any]) -> None:
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        files[rel] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    if not files:
        raise RuntimeError(f"cache build for {parts.get('label') or parts.get('kind')} wrote no files")
    manifest = {"key": json.loads(canonical_json(parts)), "files": files, "created": time.time()}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def verify_entry(directory: Path) -> dict[str, Any]:
    """Check every file against the manifest; raise CacheEntryCorrupt naming the first problem."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheEntryCorrupt(f"{directory}: unreadable manifest ({exc})") from exc
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


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
