"""A pytest plugin for the engine-lifetime self-tests (tests/selftest/test_lifetime.py), loaded into a child run
with ``-p tests.selftest.lifetime_probe``: before each test it writes one JSON line to $SUITE_LIFETIME_PROBE, the
test's id and the engines alive in the process, found two ways: the suite's own account (SuiteSession.alive) and,
independently of it, every runner object the garbage collector still reaches (each runner's ``label`` is its
cell's id). A leak the suite's bookkeeping misses shows in the second."""

from __future__ import annotations

import gc
import json
import os

import pytest


def live_runners() -> list[str]:
    """The labels of every engine runner (an object of engines/ with ``infer`` and a ``label``) the garbage collector
    still tracks: reachable ones, and unreachable ones in a reference cycle nobody collected (no collection here:
    the suite's release must have done it). Only instance dictionaries are read: a getattr on any object (pytest.mark's
    generator) can make things."""
    found = set()
    for o in gc.get_objects():
        if not str(type(o).__dict__.get("__module__", "")).startswith("engines."):
            continue
        label = (getattr(o, "__dict__", None) or {}).get("label")
        if isinstance(label, str) and hasattr(type(o), "infer"):
            found.add(label)
    return sorted(found)


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from suite.state import suite_session

    path = os.environ["SUITE_LIFETIME_PROBE"]
    line = {"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
            "alive": suite_session(item.config).alive(), "runners": live_runners()}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
