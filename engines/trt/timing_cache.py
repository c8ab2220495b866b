"""The persisted TensorRT timing cache: load it into a builder config, save it back atomically.

Why a module of its own: the cache is shared by every build of one (TensorRT version, compute capability, GPU
name), across processes, and is advisory: a missing, unreadable, corrupt or foreign file costs a slower build,
never a failed one; a save merges what another process wrote meanwhile and never leaves a half-written file.
The functions take the builder config (``trt.IBuilderConfig``) and the path, nothing else.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorrt as trt

log = logging.getLogger(__name__)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_timing_cache(config: trt.IBuilderConfig, path: Path) -> bytes:
    """Attach the timing cache stored at ``path`` (or an empty one) to ``config``; returns the bytes loaded.

    The cache is advisory: an unreadable or mismatched file costs a slower build, never a failed one.
    """
    data = b""
    if path.is_file():
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.warning("timing cache %s is unreadable (%s); starting an empty one", path, exc)
    try:
        cache = config.create_timing_cache(data)
    except Exception as exc:  # a corrupt file must not fail the build
        log.warning("timing cache %s is corrupt (%s); starting an empty one", path, exc)
        data, cache = b"", config.create_timing_cache(b"")
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        log.warning("timing cache %s was written by another TensorRT/GPU; starting an empty one", path)
        data = b""
        config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    elif data:
        log.info("timing cache: loaded %d bytes from %s", len(data), path)
    return data


def save_timing_cache(config: trt.IBuilderConfig, path: Path, loaded: bytes) -> None:
    """Write the config's timing cache back to ``path`` atomically, first merging entries another process
    wrote there since ``loaded`` was read; not rewritten when the file already holds exactly these bytes.
    Failures are logged, never raised."""
    try:
        cache = config.get_timing_cache()
        if cache is None:
            return
        disk = path.read_bytes() if path.is_file() else None
        if disk and disk != loaded:
            try:
                if not cache.combine(config.create_timing_cache(disk), ignore_mismatch=False):
                    log.debug("timing cache %s: could not merge the newer file", path)
            except Exception as exc:
                log.debug("timing cache %s: merge failed (%s)", path, exc)
        blob = bytes(cache.serialize())
        if blob == disk:
            log.debug("timing cache %s: unchanged (%d bytes), not rewritten", path, len(blob))
            return
        atomic_write_bytes(path, blob)
        log.info("timing cache: saved %d bytes to %s", len(blob), path)
    except Exception as exc:
        log.warning("could not save timing cache %s: %s", path, exc)
