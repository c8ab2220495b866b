"""Child process for the engine-cache concurrency self-tests: one ArtifactCache user, as a pytest-xdist
worker or a fleet machine would be. Run as ``python -m tests.selftest.cache_race_worker 'JSON'``.

Modes (the JSON's "mode"):
- "race": wait for the "go" file, then get_or_build every entry in ``entries``; each build appends
  this pid to ``counters/ENTRY.count`` and sleeps ``sleep`` s. Prints the paths and stats as JSON.
- "hold": build one entry whose build appends to its counter, writes a partial file, creates
  ``signal`` and then waits for ``release`` (at most ``max_hold`` s); the SIGKILL and wait tests.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from core.cache import ArtifactCache
from core.cache_manifest import verify_entry

KIND = "race"


def parts(entry: str) -> dict[str, str]:
    return {"entry": entry, "engine": "sleepy"}


def payload(entry: str) -> bytes:
    return f"engine plan of {entry}\n".encode()


def _wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _count(counters: Path, entry: str) -> None:
    with open(counters / f"{entry}.count", "a") as f:
        f.write(f"{os.getpid()}\n")


def race(cfg: dict, cache: ArtifactCache) -> dict:
    counters = Path(cfg["counters"])
    (Path(cfg["ready_dir"]) / str(os.getpid())).touch()
    if not _wait_for(Path(cfg["go"]), 20):
        raise SystemExit(f"worker {os.getpid()}: no go file {cfg['go']} within 20 s")

    def builder(entry: str):
        def build(d: Path) -> None:
            _count(counters, entry)
            time.sleep(cfg["sleep"])
            (d / "engine.plan").write_bytes(payload(entry))
        return build

    paths = {}
    for entry in cfg["entries"]:
        path = cache.get_or_build(KIND, parts(entry), builder(entry), label=f"race {entry}")
        verify_entry(path)
        if (path / "engine.plan").read_bytes() != payload(entry):
            raise SystemExit(f"worker {os.getpid()}: {path} holds another entry's plan")
        paths[entry] = str(path)
    return {"paths": paths}


def hold(cfg: dict, cache: ArtifactCache) -> dict:
    counters, entry = Path(cfg["counters"]), cfg["entries"][0]

    def build(d: Path) -> None:
        _count(counters, entry)
        (d / "engine.plan").write_bytes(payload(entry)[:5])  # partial, as a killed build leaves it
        Path(cfg["signal"]).touch()
        _wait_for(Path(cfg["release"]), cfg["max_hold"])
        (d / "engine.plan").write_bytes(payload(entry))

    path = cache.get_or_build(KIND, parts(entry), build, label=f"hold {entry}")
    return {"paths": {entry: str(path)}}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    events: list[dict] = []
    cache = ArtifactCache(cfg["root"], on_event=lambda e: events.append({"action": e.action, "detail": e.detail}))
    result = {"race": race, "hold": hold}[cfg["mode"]](cfg, cache)
    print(json.dumps({**result, "pid": os.getpid(), "stats": cache.stats.as_dict(), "events": events}))


if __name__ == "__main__":
    main()
