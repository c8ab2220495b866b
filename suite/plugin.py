"""The suite's pytest plugin: its hooks, each of which delegates to the module whose concern it is (the helpers
only the hooks use are the suite/hooks/ package; this module is its face).

- options.py: the options, read once (SuiteOptions), and their start-up checks; hooks/configure.py: the run's start
  (config, device, workers, cache, the run's state and plugin objects); hooks/interrupts.py: a SIGTERM or a stop
  during start-up, internal errors.
- hooks/parametrize.py: each test's cases from the session's cells; hooks/collection.py: what is deselected or
  cannot run here, and the run order; hooks/startup_check.py: the start-up check of the collected models.
- hooks/runtest.py: a cell that cannot run, resource errors, engines released after each test;
  hooks/known_failures_runtime.py: a known failure passes only when it fails the declared way.
- hooks/verdict_wiring.py: reports into the ledger, the verdict settled, the files written, the verdict block last;
  hooks/terminal.py: the header and the summary's lines; hooks/run_identity.py: what a saved run says of the suite.

Registered through the ``pytest11`` entry point (pyproject.toml) where the project is installed, so
its options parse in both spellings (``--engine-cache /tmp/x`` and ``--engine-cache=/tmp/x``) from any
directory; the root ``conftest.py`` registers it where it is not. Tests stay thin: they ask for a
``cell`` (or ``latency_case``) and the ``suite`` session (the two fixtures below), and assert with metrics' verdicts.

Every outcome reports into ``suite.verdict.Ledger`` (one per run, in the controlling process):
skips carry their reason code, a cell that cannot run where it is required fails, a known failure
passes only when it fails the declared way, and the run's exit code and last block come from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from suite import options
from suite.device import check_device
from suite.environment import fingerprint
from suite.fleet import workers
from suite.fleet.plugin import shard_environment, worker_layout
from suite.gate import benchmark_compare
from suite.hooks import (
    collection,
    configure,
    interrupts,
    known_failures_runtime,
    parametrize,
    run_identity,
    runtest,
    startup_check,
    terminal,
    verdict_wiring,
)
from suite.hooks.cmdline import check_rootdir
from suite.session import SuiteSession
from suite.state import LIFETIME_KEY, suite_session

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # before anything imports onnxruntime (it writes at import)

_ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Any:
    """Before anything is collected: a run that pytest rooted outside the project because an option's path was
    written in the space form starts again with the ``=`` form (suite/hooks/cmdline.py says why). The outermost
    wrapper, so that this happens before pytest's capture takes over the terminal's file descriptors."""
    check_rootdir(early_config, parser, _ROOT)
    interrupts.install_sigterm_handler()  # a CI timeout's SIGTERM ends the run as Ctrl-C (suite/hooks/interrupts.py)
    return (yield)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto --device cuda``: one worker per visible GPU (suite/fleet/plugin.py). A module-level hook, because xdist
    resolves ``auto`` in pytest_cmdline_main, before any plugin object registered at configure time exists."""
    return workers.auto_workers(options.requested_device(config), lambda: check_device("cuda"))


def pytest_configure(config: pytest.Config) -> None:
    interrupts.configuring(config)
    configure.configure(config)  # the config, start-up checks, the run's state and plugins (suite/hooks/configure.py)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    interrupts.note_keyboard_interrupt(excinfo)


def pytest_unconfigure(config: pytest.Config) -> None:
    lifetime = config.stash.get(LIFETIME_KEY, None)
    if lifetime is not None:
        lifetime.close()
    startup_check.forget_failed_models(config)
    interrupts.unconfigure(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return terminal.header_lines(config)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Every saved benchmark carries the environment it was measured in, and how the run was spread (an xdist
    run's controller writes its merged file with the workers' environment instead: suite/fleet/benchmark_files.py)."""
    machine_info["suite_environment"] = {**fingerprint(options.options_of(config).device),
                                         **worker_layout(config), **shard_environment(config)}


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """A saved pytest-benchmark run says whether the run ended; the gate refuses an incomplete baseline."""
    output_json["suite"] = run_identity.saved_benchmark_run(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize.generate_tests(metafunc)


@pytest.fixture(scope="session")
def suite(request: pytest.FixtureRequest) -> SuiteSession:
    """The session: config, cache, datasets, engines and reference outputs, each built once."""
    return suite_session(request.config)


@pytest.fixture
def engine_for(suite: SuiteSession) -> Any:
    """``engine_for(cell)``: the loaded engine. A cell that cannot run raises CellUnavailable, which
    ``pytest_pyfunc_call`` turns into a not-judged skip, or a failure where the cell is required."""
    return suite.engine


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    """A cell that cannot run: a not-judged skip, or a failure where required; a resource error fails its check."""
    return (yield from runtest.pyfunc_call(pyfuncitem))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    runtest.before_setup(item)  # a test whose model failed the start-up check fails here, with the cause
    if LIFETIME_KEY in item.config.stash:
        item.config.stash[LIFETIME_KEY].before(item)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """An xdist controller starts a worker: where it reads the models that failed their start-up check."""
    startup_check.configure_node(node.config, node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After the test's fixtures are gone: engines released, peak GPU memory gated (suite/hooks/runtest.py)."""
    result = yield
    runtest.after_teardown(item, nextitem)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Around the test function: where its records start, and the precision census of the cells it recorded."""
    known_failures_runtime.note_records_start(item)
    try:
        return (yield)
    finally:
        runtest.after_call(item, known_failures_runtime.test_records(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure of a test a known failure covers passes only when it is the declared one
    (suite/hooks/known_failures_runtime.py); a latency case --benchmark-compare-fail flags fails on its own report
    (suite/gate/benchmark_compare.py)."""
    report = yield
    known_failures_runtime.judge(item, call, report)
    benchmark_compare.judge(item, report)
    return report


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """What the user left out by request is deselected; the rest runs a model at a time (suite/hooks/collection.py)."""
    collection.select_and_order(config, items)


def pytest_internalerror(excrepr: Any, excinfo: Any) -> None:
    interrupts.note_internal_error(excrepr, excinfo)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Any:
    """The outermost wrapper: after pytest's own summary and stats line, the run ends with the verdict
    (suite/hooks/verdict_wiring.py)."""
    return (yield from verdict_wiring.finish(session))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    terminal.summary(terminalreporter, config)
