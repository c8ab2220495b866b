"""Content-addressed artifact cache shared by fixtures (trained weights) and engines (ONNX, engines).

Why: a stale artifact silently reused after an upgrade is the worst failure a regression suite can
have, so an entry's address is a hash of *everything* that changes its content (the caller lists it),
every file is checksummed in a manifest, and a corrupt or truncated entry is detected and rebuilt.

Layout: ``ROOT/KIND/KEY/`` holds an entry's files plus ``manifest.json``; ``KEY`` is
``digest({"kind": kind, **parts})``. The manifest records that key object (``manifest["key"]``), the
label (not part of the address), and each file's size and SHA-256.

Checks: before an entry is used, its manifest and every file are verified (core/cache_manifest.py's
``verify_entry``); a failure is ``CacheEntryCorrupt`` with the reason, and ``get_or_build`` reports it and
rebuilds. The key's hashing is core/hashing.py's; what the cache did in a run (hits, builds, waits) is recorded
in core/cache_stats.py's ``CacheStats``.

Concurrency: a nightly fleet shares one cache directory and an engine build takes minutes, so each
entry has a lock file ``ROOT/KIND/KEY.lock`` (``filelock.FileLock``: ``flock``, which the kernel
releases when its holder dies, so a killed builder never leaves a lock that deadlocks). A valid
entry is read without the lock; a miss takes the lock, looks again (another process may have built
it meanwhile: a hit) and only then builds. A process that has to wait emits a "wait" event naming the
builder and the lock. Entries are built in a private temporary directory
``.tmp-KEY-pidPID@HOST-XXXX`` and moved into place with one atomic rename, so an interrupted build
never leaves a half-written entry. Temporary directories of killed builders are removed at the start of
each run (``ensure_usable``, every KIND directory) and by the next build in the same KIND directory, when
nobody holds their entry's lock and their owner is a dead process on this host or (owner on another host,
or unknown) they are older than ``STALE_TMP_AGE_S``.
Lock files are left in place: removing one while another process waits on it would break the lock.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from core.cache_manifest import CacheEntryCorrupt, _write_manifest, verify_entry
from core.cache_stats import CacheEvent, CacheStats
from core.hashing import canonical_json, digest

STALE_TMP_AGE_S = 24 * 3600.0  # an unowned temporary directory older than this is a killed build's
_TMP_RE = re.compile(r"^\.tmp-(?P<key>[0-9a-f]{64})-pid(?P<pid>\d+)@(?P<host>[A-Za-z0-9._-]*)-[A-Za-z0-9_]+$")


class CacheUnusable(ValueError):
    """The cache root cannot hold entries (a file, not creatable, not writable): a usage error, not a bug."""


class CacheFull(CacheUnusable):
    """The disk under the cache filled up while an entry was built: one line naming the entry and the space left,
    not a traceback (a full disk gave 73 INTERNALERROR lines)."""


def disk_full(exc: BaseException) -> OSError | None:
    """The out-of-space error (ENOSPC, EDQUOT) behind ``exc``, whatever wrapped it (an exporter's own error)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return current
        current = current.__cause__ or current.__context__
    return None


class ArtifactCache:
    """Directory of immutable entries ``ROOT/KIND/KEY/`` each holding files plus a checksummed manifest."""

    def __init__(self, root: Path | str, on_event: Callable[[CacheEvent], None] | None = None) -> None:
        self.root = _expand_user(Path(root))  # --engine-cache=~/x: the shell leaves a '~' after '=' (or in quotes)
        self.stats = CacheStats()
        self._on_event = on_event

    def ensure_usable(self) -> None:
        """Create the root if needed and prove it and each kind directory in it writable, so that a bad
        --engine-cache fails at start-up, once (a read-only ``onnx/`` once failed every build with a
        PermissionError); then remove what killed builders left in every kind directory (a kind where this run
        builds nothing would otherwise keep them for ever). Once per run: a listing of each kind directory."""
        root = self.root
        if root.exists() and not root.is_dir():
            raise CacheUnusable(f"engine cache {root} is a file, not a directory")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheUnusable(f"engine cache {root} cannot be created: {exc.strerror or exc}") from exc
        _probe(root, f"engine cache {root} is not writable")
        try:
            kinds = sorted(p for p in root.iterdir() if not p.name.startswith(".") and p.is_dir())
        except OSError as exc:
            raise CacheUnusable(f"engine cache {root} cannot be listed: {exc.strerror or exc}") from exc
        for kind_dir in kinds:
            _probe(kind_dir, f"engine cache {root}: its {kind_dir.name}/ directory is not writable")
            _sweep_stale_tmp(kind_dir, held_key="", ours_only=True)

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
        the directory is moved into place atomically. On failure nothing is left in the cache. At most
        one process builds an entry at a time (its lock); the others wait and then use that one's.
        """
        final = self.entry_dir(kind, parts)
        key = final.name
        label = label or kind
        address = {"kind": kind, **parts}
        if _check(final, address) is None:
            return self._hit(kind, label, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(final.parent / f"{key}.lock"))
        self._acquire(lock, kind, label, key)
        try:
            problem = _check(final, address)
            if problem is None:
                return self._hit(kind, label, key)  # another process built it while we waited
            action, detail = ("rebuild-corrupt", problem) if problem else ("build", "")
            if problem:
                _move_aside(final, key)
            _sweep_stale_tmp(final.parent, held_key=key)
            return self._build(final, address, build, label, action, detail)
        finally:
            lock.release()

    def _hit(self, kind: str, label: str, key: str) -> Path:
        self.stats.hits += 1
        self._emit(CacheEvent(kind, label, key, "hit"))
        return self.root / kind / key

    def _acquire(self, lock: FileLock, kind: str, label: str, key: str) -> None:
        """Take the entry's lock; if another process holds it, say so once and count the wait."""
        try:
            lock.acquire(blocking=False)
            return
        except Timeout:
            pass
        start = time.perf_counter()
        holder = _describe_builder(Path(lock.lock_file).parent, key)
        if self._on_event is not None:
            self._on_event(CacheEvent(kind, label, key, "wait",
                                      detail=f"{label} is being built by {holder}; waiting on {lock.lock_file}"))
        lock.acquire()
        self.stats.waits += 1
        self.stats.wait_seconds += time.perf_counter() - start

    def _build(self, final: Path, address: Mapping[str, Any], build: Callable[[Path], None], label: str,
               action: str, detail: str) -> Path:
        kind, key = final.parent.name, final.name
        stored = json.loads(canonical_json(address))
        if digest(stored) != key:
            raise TypeError(f"cache key of {label} ({kind}) hashes differently once stored as JSON, so its entry "
                            f"could never be verified; use string dict keys in its parts: {canonical_json(address)}")
        if self._on_event is not None:
            self._on_event(CacheEvent(kind, label, key, "start", detail=detail))
        tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(key), dir=final.parent))
        start = time.perf_counter()
        try:
            build(tmp)
            _write_manifest(tmp, stored, label)
            try:
                os.rename(tmp, final)
            except OSError:
                # A process that does not take the lock (an older suite) finished it first; theirs is as good.
                if not final.exists():
                    raise
                verify_entry(final)
                _remove(tmp)
        except BaseException as exc:
            _remove(tmp)
            full = disk_full(exc)
            if full is not None:
                free = shutil.disk_usage(final.parent).free / 2**20
                raise CacheFull(f"engine cache {self.root}: no space left on the device while building {label} "
                                f"({free:.1f} MiB free after removing the half-built entry): free some space or "
                                f"point --engine-cache at another disk ({full.strerror})") from exc
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


def _probe(directory: Path, problem: str) -> None:
    """Create and remove a file in ``directory``; CacheUnusable(problem: why) where that fails."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise CacheUnusable(f"{problem}: {exc.strerror or exc}") from exc


def _check(final: Path, address: Mapping[str, Any]) -> str | None:
    """None: a valid entry; "": no entry; otherwise why the entry there is corrupt."""
    if not os.path.lexists(final):
        return ""
    try:
        verify_entry(final, expected_key=address)
    except CacheEntryCorrupt as exc:
        return str(exc)
    return None


def _expand_user(path: Path) -> Path:
    """``~`` and ``~user`` as the shell would expand them; a user that does not exist leaves the path as it is."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "unknown"


def _tmp_prefix(key: str) -> str:
    """``.tmp-KEY-pidPID@HOST-``: who made a temporary directory, so a dead owner's can be told apart."""
    return f".tmp-{key}-pid{os.getpid()}@{_host()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True


def _owner(tmp: Path) -> tuple[str | None, int | None, str | None]:
    """(entry key, pid, host) from a temporary directory's name; Nones when it does not follow the pattern."""
    m = _TMP_RE.match(tmp.name)
    return (m["key"], int(m["pid"]), m["host"]) if m else (None, None, None)


def _describe_builder(kind_dir: Path, key: str) -> str:
    """'pid 4242 on gpu-07 (for 12 s)' from the builder's temporary directory, when it has made one."""
    for tmp in sorted(kind_dir.glob(f".tmp-{key}-*")):
        owner_key, pid, host = _owner(tmp)
        if owner_key == key and pid is not None and (host != _host() or _pid_alive(pid)):
            try:
                age = f" (for {time.time() - tmp.stat().st_mtime:.0f} s)"
            except OSError:
                age = ""
            return f"pid {pid} on {host}{age}"
    return "another process (it has not started writing yet)"


def _sweep_stale_tmp(kind_dir: Path, held_key: str, ours_only: bool = False) -> None:
    """Remove killed builders' temporary directories; never one whose owner may still be writing it.

    Stale means: nobody holds its entry's lock (a live builder always does) and either its owner is a
    dead process on this host, or (another host, or a name without an owner) it is older than
    ``STALE_TMP_AGE_S``. The age limit covers filesystems where locks do not reach other hosts.
    ``ours_only``: only names this cache makes (``.tmp-KEY-pidPID@HOST-...``), for directories that may be
    another tool's (the start-of-run sweep lists every directory of the root).
    """
    try:
        candidates = [p for p in kind_dir.iterdir() if p.name.startswith(".tmp-")]
    except OSError:
        return
    now, here = time.time(), _host()
    for tmp in candidates:
        key, pid, host = _owner(tmp)
        if ours_only and key is None:
            continue
        try:
            old = now - tmp.lstat().st_mtime > STALE_TMP_AGE_S
        except OSError:
            continue  # already gone
        dead_here = host == here and pid is not None and pid != os.getpid() and not _pid_alive(pid)
        if not (dead_here or old):
            continue
        if key is None or key == held_key:
            if key is None and not old:
                continue
            _remove(tmp)
            continue
        other = FileLock(str(kind_dir / f"{key}.lock"))
        try:
            other.acquire(blocking=False)
        except Timeout:
            continue  # its entry is being built right now: perhaps by the owner, in another pid namespace
        try:
            _remove(tmp)
        finally:
            other.release()


def _move_aside(final: Path, key: str) -> None:
    """Take a corrupt entry out of its address atomically, then delete it (a sweep finishes if we die)."""
    trash = final.parent / f"{_tmp_prefix(key)}corrupt{uuid.uuid4().hex[:8]}"
    try:
        os.rename(final, trash)
    except FileNotFoundError:
        return
    _remove(trash)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass
