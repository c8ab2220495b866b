"""The last weights digest of each model, kept in the artifact cache: a factory whose weights change from run to
run while its architecture does not (an unseeded initialisation) rebuilds every engine every run, so it is told."""

from __future__ import annotations

import json
import logging
import os

from filelock import FileLock, Timeout

from core.cache import ArtifactCache

log = logging.getLogger(__name__)

#: The last weights digest of each model, by name: ROOT/preflight/WEIGHTS_FILE of the artifact cache.
WEIGHTS_FILE = "last-weights.json"


def weights_changed(cache: ArtifactCache, model: str, digest: str, architecture: str) -> tuple[str, str] | None:
    """Remember this run's digest of ``model`` in the cache; (last run's digest, this one) when only the weights
    differ from last run's. Best effort: a cache this cannot write to only loses the warning."""
    path = cache.root / "preflight" / WEIGHTS_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock", timeout=10):
            try:
                seen = json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                seen = {}
            seen = seen if isinstance(seen, dict) else {}
            before = seen.get(model)
            seen[model] = {"digest": digest, "architecture": architecture}
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(seen, indent=1, sort_keys=True))
            os.replace(tmp, path)
    except (OSError, Timeout) as exc:
        log.debug("cannot remember the weights digest of %s in %s: %s", model, path, exc)
        return None
    if (isinstance(before, dict) and before.get("architecture") == architecture
            and isinstance(before.get("digest"), str) and before["digest"] != digest):
        return before["digest"], digest
    return None
