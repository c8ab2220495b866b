"""Shared by the gate and report self-tests: one ordinary run of the tiny config that saves both
baselines, made once per session (each run is a child pytest: seconds of start-up and export)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.selftest.suite_runs import explain, run_suite


def pytest_configure(config: pytest.Config) -> None:
    """The self-tests' markers, registered here (not by the suite's plugin: tools/mutation.sh runs these tests
    with the plugins switched off)."""
    config.addinivalue_line("markers", "selftest: tests of the suite's own machinery; CPU only, no engines")
    config.addinivalue_line("markers", "timing: a self-test whose outcome depends on how busy the machine is (it "
                            "times real runs); left out of the default self-test command (-m 'not timing'), run "
                            "by the nightly workflow")
    # A child pytest that a self-test starts runs as a user would start it, not as the xdist worker this process may
    # be (-n 2): xdist itself reads config.workerinput, but a child inherits the environment, and the suite's plugin
    # in it would take a worker's CPU share and send its results to a controller that is not there.
    for key in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        os.environ.pop(key, None)


@pytest.fixture(scope="session")
def suite_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work directory holding benchmarks/*/0001_base.json (pytest-benchmark) and base.json (--suite-results)."""
    workdir = tmp_path_factory.mktemp("gate")
    done = run_suite(workdir, "--benchmark-save", "base", "--suite-results", str(workdir / "base.json"))
    assert done.returncode == 0, explain(done)
    assert (workdir / "base.json").exists() and list((workdir / "benchmarks").glob("*/0001_base.json"))
    return workdir
