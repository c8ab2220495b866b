"""Runs of the suite on the tiny config in a child process, for the gate and report self-tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "selftest" / "data" / "tiny_suite.toml"


def run_suite(workdir: Path, *args: str, tests: tuple[str, ...] = (),
              env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """pytest on the tiny config in a child process, as a user would run it (its own cache and storage).
    ``env`` changes the child's environment: each variable set to its value, or removed where it is None."""
    cmd = [sys.executable, "-m", "pytest", *(tests or (
        str(ROOT / "tests" / "latency" / "test_latency.py"), str(ROOT / "tests" / "accuracy"),
        str(ROOT / "tests" / "parity" / "test_parity.py::test_parity_on_dataset"))),
        "-p", "no:cacheprovider", "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
        "--suite-config", str(TINY), "--engine-cache", str(workdir / "cache"),
        "--benchmark-storage", f"file://{workdir / 'benchmarks'}", "-q", "-rf", "--color=no", *args]
    child = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for key, value in (env or {}).items():
        if value is None:
            child.pop(key, None)
        else:
            child[key] = value
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600, env=child)


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
