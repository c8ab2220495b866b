"""Runs of the suite on the tiny config in a child process, for the gate, report, fail-closed and hostile-input
self-tests.

Why a zygote: each run is a child pytest, as a user would start it, and most of what a short run costs is the
child importing torch and the suite (2-5 s). ``run_suite`` therefore forks each run from one process that has
imported them once (``Forker``), unless the run needs an environment of its own (``env``) or ``fork=False``;
a test that signals its child starts a real process itself.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "selftest" / "data" / "tiny_suite.toml"
DEFAULT_TESTS = (str(ROOT / "tests" / "latency" / "test_latency.py"), str(ROOT / "tests" / "accuracy"),
                 str(ROOT / "tests" / "parity" / "test_parity.py::test_parity_on_dataset"))

#: Every child runs as on a CI machine, where the suite is gated: with CI set, pytest prints more (each
#: failure's whole message, assertion explanations untruncated), and the output budgets must hold there.
CHILD_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "CI": "true"}


def run_suite(workdir: Path, *args: str, tests: tuple[str, ...] = (),
              env: Mapping[str, str | None] | None = None, fork: bool = True) -> subprocess.CompletedProcess[str]:
    """pytest on the tiny config in a child process, as a user would run it (its own cache and storage).
    ``env`` changes the child's environment: each variable set to its value, or removed where it is None (such
    a run starts a process of its own, as does ``fork=False``; the others are forked by the shared zygote)."""
    argv = suite_args(workdir, *args, tests=tests)
    cmd = [sys.executable, "-m", "pytest", *argv]
    if env is None and fork:
        code, stdout, stderr, _ = shared_forker().run(workdir, argv)
        return subprocess.CompletedProcess(cmd, code, stdout, stderr)
    child = {**os.environ, **CHILD_ENV}
    for key, value in (env or {}).items():
        if value is None:
            child.pop(key, None)
        else:
            child[key] = value
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600, env=child)


def ci_environment(**values: str) -> dict[str, str | None]:
    """A child's CI variables, exactly ``values`` (an ``env`` for run_suite): pytest-metadata copies every CI variable
    it knows that is set (``CI=true`` on most CI machines) into pytest-html's environment block, so a report test
    that inherited them would judge the CI machine, not the report."""
    from pytest_metadata.plugin import CONTINUOUS_INTEGRATION

    unset: dict[str, str | None] = {var: None for provider in CONTINUOUS_INTEGRATION for var in provider}
    return {**unset, **values}


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"


def timed_only(done: subprocess.CompletedProcess[str]) -> bool:
    """Whether a run timed latency with no baseline and judged nothing else (a run that saves a baseline): each of
    its checks not judged for want of a baseline (accepted by the tiny config), so it ends not judged, non-zero,
    never passed (docs/gating.md); not a run that failed or stopped."""
    counts = re.search(r"^checks: 0 passed, 0 failed, (\d+) not judged$", done.stdout, flags=re.M)
    return (counts is not None and done.returncode != 0 and "VERDICT: NOT JUDGED" in done.stdout
            and f"not judged (no-baseline, accepted): {counts[1]}:" in done.stdout)


# Each run is a child pytest with the command line, working directory and environment of
# a plain child process. Only the start of the process differs: a "zygote" process imports
# pytest, the suite's plugins and torch once (about 2 s of every run, most of what a start-up error costs) and
# forks a child per run, which runs `python -m pytest`'s own __main__ in a process that has run nothing else.
# test_hostile_inputs.py's test_forked_runs_read_as_plain_child_runs checks that a run reads the same either way.
_ZYGOTE = r"""
import json, os, runpy, select, sys, traceback
import pytest
import suite.plugin, suite.gate.plugin, report.plugin  # torch, numpy, the suite: what every run imports first

MAIN = os.path.join(os.path.dirname(pytest.__file__), "__main__.py")  # argv[0] of `python -m pytest`
PATH = list(sys.path[1:])


def child(job):
    code = 70
    try:
        os.chdir(job["cwd"])
        for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        os.environ.clear()
        os.environ.update(job["env"])
        sys.argv = [MAIN, *job["args"]]
        sys.path[:] = [job["cwd"], *PATH]  # sys.path[0] of `python -m` is the working directory
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    os._exit(code)


pending, buffer, reading = {}, b"", True
while reading or pending:
    if reading and select.select([0], [], [], 0.02)[0]:
        chunk = os.read(0, 1 << 16)
        reading = bool(chunk)
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            job = json.loads(line)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                child(job)
            pending[pid] = job["id"]
    while pending:
        pid, status, usage = os.wait4(-1, 0 if not reading else os.WNOHANG)
        if pid == 0:
            break
        reply = {"id": pending.pop(pid), "code": os.waitstatus_to_exitcode(status),
                 "cpu": usage.ru_utime + usage.ru_stime}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
"""


def suite_args(work: Path, *args: str, tests: tuple[str, ...]) -> list[str]:
    """pytest's arguments for a run of the suite in ``work``, as run_suite gives them."""
    return [*(tests or DEFAULT_TESTS), "-p", "no:cacheprovider", "--rootdir", str(ROOT), "-c",
            str(ROOT / "pyproject.toml"), "--suite-config", str(TINY), "--engine-cache", str(work / "cache"),
            "--benchmark-storage", f"file://{work / 'benchmarks'}", "-q", "-rf", "--color=no", *args]


class Forker:
    """The zygote: ``run(work, args)`` forks a child pytest in ``work``: (exit code, stdout, stderr, CPU seconds)."""

    def __init__(self) -> None:
        self.env = {**os.environ, **CHILD_ENV}
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE], cwd=ROOT, env=self.env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lock = threading.Lock()
        self.done: dict[int, tuple[threading.Event, list[dict]]] = {}
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            reply = json.loads(line)
            event, replies = self.done[reply["id"]]
            replies.append(reply)
            event.set()
        for event, replies in list(self.done.values()):  # the zygote ended: nobody waits forever
            replies.append({"code": -1, "cpu": 0.0})
            event.set()

    def run(self, work: Path, args: list[str]) -> tuple[int, str, str, float]:
        with self.lock:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the zygote exited with {self.proc.returncode}; see its stderr above")
            self.next_id += 1
            job_id = self.next_id
            self.done[job_id] = (threading.Event(), [])
            out = Path(tempfile.mkdtemp(prefix="suite-run-"))  # not in work: tests look at what a run wrote there
            job = {"id": job_id, "cwd": str(work), "args": args, "env": self.env,
                   "stdout": str(out / "stdout"), "stderr": str(out / "stderr")}
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        event, replies = self.done[job_id]
        if not event.wait(600):
            raise TimeoutError(f"the run in {work} did not end in 600 s")
        reply = replies[0]
        try:
            return reply["code"], (out / "stdout").read_text(), (out / "stderr").read_text(), reply["cpu"]
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def make_unwritable(path: Path) -> None:
    """``path``, a directory nobody can create files in. chmod does not stop root, so as root it is a link to
    /sys (sysfs: root cannot create files there either). Undo a non-root one with ``path.chmod(0o755)``."""
    if os.geteuid() == 0:
        path.symlink_to("/sys")
    else:
        path.mkdir()
        path.chmod(0o555)


_SHARED: list[Forker] = []


def shared_forker() -> Forker:
    """The zygote every run_suite call of this process shares, started on first use, closed at exit."""
    if not _SHARED or _SHARED[0].proc.poll() is not None:
        _SHARED[:] = [Forker()]
        atexit.register(_SHARED[0].close)
    return _SHARED[0]
