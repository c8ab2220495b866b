"""The engine cache across processes: each entry is built once, a killed builder neither deadlocks the
next one nor leaves its temporary directory, a waiting process says what it waits for, and stale
temporary directories are swept while live ones are kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from core.cache import ArtifactCache, _host
from core.cache_manifest import verify_entry
from core.cache_stats import CacheStats
from tests.selftest import cache_race_worker as worker

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
BASE = {"model_digest": "abc", "engine": "tensorrt", "precision": "int8"}


def _start(cfg: dict) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen([sys.executable, "-m", "tests.selftest.cache_race_worker", json.dumps(cfg)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 30) -> dict:
    """The worker's JSON report; a worker that fails or hangs fails the test with its output."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"cache worker {proc.pid} still running after {timeout} s (deadlock?)\n{out}\n{err}")
    assert proc.returncode == 0, f"cache worker {proc.pid} exited {proc.returncode}\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def _wait_for(path: Path, seconds: float, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate() if proc.poll() is not None else ("", "")
            pytest.fail(f"cache worker {proc.pid} did not create {path} within {seconds} s\n{out}\n{err}")
        time.sleep(0.01)


def _counts(counters: Path) -> dict[str, int]:
    return {p.stem: len(p.read_text().split()) for p in sorted(counters.glob("*.count"))}


def _tmp_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".tmp-*"))


def test_racing_processes_build_each_entry_exactly_once(tmp_path):
    root, counters, ready = tmp_path / "cache", tmp_path / "counters", tmp_path / "ready"
    counters.mkdir()
    ready.mkdir()
    entries, n = ["resnet18-fp16", "resnet18-int8", "digits-fp32"], 4
    cfg = {"mode": "race", "root": str(root), "counters": str(counters), "ready_dir": str(ready),
           "go": str(tmp_path / "go"), "entries": entries, "sleep": 0.3}
    procs = [_start(cfg) for _ in range(n)]
    deadline = time.monotonic() + 20
    while len(list(ready.iterdir())) < n:  # start together, so that the builds overlap
        assert time.monotonic() < deadline, f"only {len(list(ready.iterdir()))} of {n} cache workers started"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    reports = [_finish(p) for p in procs]

    assert _counts(counters) == dict.fromkeys(entries, 1), "every entry must be built by exactly one process"
    for entry in entries:
        paths = {r["paths"][entry] for r in reports}
        assert len(paths) == 1, f"processes disagree on the entry of {entry}: {paths}"
        verify_entry(Path(paths.pop()))
    total = sum((CacheStats.from_dict(r["stats"]) for r in reports), CacheStats())
    assert (total.builds, total.hits) == (len(entries), len(entries) * (n - 1))
    assert total.waits >= 1 and total.wait_seconds > 0, "overlapping builds must have made someone wait"
    waits = [e for r in reports for e in r["events"] if e["action"] == "wait"]
    assert len(waits) == total.waits and all(".lock" in e["detail"] for e in waits)
    assert _tmp_dirs(root) == []


def test_killed_builder_neither_deadlocks_the_next_nor_leaves_its_tmp_dir(tmp_path):
    root, counters = tmp_path / "cache", tmp_path / "counters"
    counters.mkdir()
    entry = "trt-engine"
    cfg = {"mode": "hold", "root": str(root), "counters": str(counters), "entries": [entry],
           "signal": str(tmp_path / "building"), "release": str(tmp_path / "never"), "max_hold": 30}
    holder = _start(cfg)
    _wait_for(tmp_path / "building", 15, holder)
    orphan = [name for name in _tmp_dirs(root) if f"-pid{holder.pid}@" in name]
    assert len(orphan) == 1, f"the builder's tmp dir should name its pid {holder.pid}: {_tmp_dirs(root)}"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    assert _tmp_dirs(root) == orphan, "SIGKILL left the tmp dir behind (the case under test)"

    next_cfg = {**cfg, "mode": "race", "ready_dir": str(tmp_path), "go": str(tmp_path / "building"), "sleep": 0}
    report = _finish(_start(next_cfg), timeout=20)

    assert report["stats"]["builds"] == 1 and report["stats"]["waits"] == 0, report
    assert _counts(counters) == {entry: 2}, "the killed build and the one after it"
    assert _tmp_dirs(root) == [], "the killed builder's tmp dir must be swept"
    verify_entry(Path(report["paths"][entry]))


def test_a_waiting_process_says_who_builds_what_and_counts_the_wait(tmp_path):
    root, counters = tmp_path / "cache", tmp_path / "counters"
    counters.mkdir()
    entry, release = "aoti-package", tmp_path / "release"
    holder = _start({"mode": "hold", "root": str(root), "counters": str(counters), "entries": [entry],
                     "signal": str(tmp_path / "building"), "release": str(release), "max_hold": 20})
    _wait_for(tmp_path / "building", 15, holder)
    events = []

    def on_event(event):
        events.append(event)
        if event.action == "wait":
            time.sleep(0.1)
            release.touch()  # let the builder finish only now, so the wait is real

    cache = ArtifactCache(root, on_event=on_event)
    path = cache.get_or_build(worker.KIND, worker.parts(entry), lambda d: pytest.fail("built twice"),
                              label=f"hold {entry}")
    _finish(holder)

    waits = [e for e in events if e.action == "wait"]
    assert len(waits) == 1, [e.action for e in events]
    lock = root / worker.KIND / f"{path.name}.lock"
    assert f"pid {holder.pid} on {_host()}" in waits[0].detail and str(lock) in waits[0].detail, waits[0].detail
    assert f"hold {entry}" in waits[0].detail
    assert (cache.stats.waits, cache.stats.hits, cache.stats.builds) == (1, 1, 0)
    assert cache.stats.wait_seconds >= 0.1
    assert cache.stats.summary_line().endswith(f", 1 wait ({cache.stats.wait_seconds:.1f} s)")
    assert (path / "engine.plan").read_bytes() == worker.payload(entry)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_only_temporary_dirs_whose_owner_is_gone(tmp_path):
    cache = ArtifactCache(tmp_path)
    kind_dir = tmp_path / "engine"
    kind_dir.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead, here = _dead_pid(), _host()
    key = lambda c: c * 64
    names = {
        "dead here": f".tmp-{key('a')}-pid{dead}@{here}-x1",
        "live here": f".tmp-{key('b')}-pid{sleeper.pid}@{here}-x2",
        "mine": f".tmp-{key('c')}-pid{os.getpid()}@{here}-x3",
        "other host, young": f".tmp-{key('d')}-pid{dead}@elsewhere-7-x4",
        "other host, old": f".tmp-{key('e')}-pid{dead}@elsewhere-7-x5",
        "dead here, entry locked": f".tmp-{key('f')}-pid{dead}@{here}-x6",
        "no owner, young": ".tmp-0123456789ab-deadbeef-x7",
        "no owner, old": ".tmp-0123456789ab-deadbeef-x8",
        "live here, old, entry locked": f".tmp-{key('9')}-pid{sleeper.pid}@{here}-x9",
    }
    for name in names.values():
        (kind_dir / name).mkdir()
        (kind_dir / name / "partial.bin").write_bytes(b"x")
    two_days_ago = time.time() - 2 * 24 * 3600
    for label in ("other host, old", "no owner, old", "live here, old, entry locked"):
        os.utime(kind_dir / names[label], (two_days_ago, two_days_ago))
    try:
        with FileLock(str(kind_dir / f"{key('f')}.lock")), FileLock(str(kind_dir / f"{key('9')}.lock")):
            cache.get_or_build("engine", BASE, lambda d: (d / "engine.bin").write_bytes(b"plan"))
    finally:
        sleeper.kill()
        sleeper.wait()
    left = {label for label, name in names.items() if (kind_dir / name).exists()}
    assert left == {"live here", "mine", "other host, young", "dead here, entry locked", "no owner, young",
                    "live here, old, entry locked"}


def test_the_start_of_a_run_sweeps_every_kind_directory_where_nothing_is_built(tmp_path):
    """ensure_usable (once per run) removes dead builders' temporary directories in each kind directory, also where
    this run builds nothing (before, only a build in the same kind swept); a live builder's, an unowned one and
    another tool's directory are left alone."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead, here = _dead_pid(), _host()
    made = {
        "onnx/dead": f"onnx/.tmp-{'a' * 64}-pid{dead}@{here}-x1",
        "trt/dead": f"trt/.tmp-{'b' * 64}-pid{dead}@{here}-x2",
        "trt/live": f"trt/.tmp-{'c' * 64}-pid{sleeper.pid}@{here}-x3",
        "torchinductor/foreign": "torchinductor/.tmp-cache-x4",
    }
    for path in made.values():
        (tmp_path / path).mkdir(parents=True)
    old = time.time() - 2 * 24 * 3600
    os.utime(tmp_path / made["torchinductor/foreign"], (old, old))
    try:
        ArtifactCache(tmp_path).ensure_usable()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert {label for label, path in made.items() if (tmp_path / path).exists()} == {"trt/live",
                                                                                        "torchinductor/foreign"}
