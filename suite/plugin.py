"""The suite's pytest plugin: its hooks, which delegate. Options are suite/options.py, what is collected
suite/collection.py, how a run is identified suite/run_identity.py; here stay configure, parametrization over cells,
the session fixtures, engine lifetime and known failures around each test, and the verdict's wiring.

Registered through the ``pytest11`` entry point (pyproject.toml) where the project is installed, so
its options parse in both spellings (``--engine-cache /tmp/x`` and ``--engine-cache=/tmp/x``) from any
directory; the root ``conftest.py`` registers it where it is not. Tests stay thin: they ask for a
``cell`` (or ``latency_case``) and the ``suite`` session, and assert with metrics' verdicts.

Every outcome reports into ``suite.verdict.Ledger`` (one per run, in the controlling process):
skips carry their reason code, a cell that cannot run where it is required fails, a known failure
passes only when it fails the declared way, and the run's exit code and last block come from it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from suite import (
    collection,
    configure,
    interrupts,
    known_failures_runtime,
    options,
    parametrize,
    run_identity,
    runtest,
    startup_check,
    verdict_wiring,
    workers,
)
from suite.cmdline import check_rootdir
from suite.device import check_device
from suite.environment import fingerprint
from suite.gate.state import self_test_knobs
from suite.gpu_memory import memory_summary
from suite.rebuild import describe as describe_rebuild
from suite.session import SuiteSession
from suite.state import (
    LEDGER_KEY,
    LIFETIME_KEY,
    RUN_KEY,
    SESSION_KEY,
    suite_session,
)
from suite.workers import is_worker

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # before anything imports onnxruntime (it writes at import)
log = logging.getLogger("suite")

_ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Any:
    """Before anything is collected: a run that pytest rooted outside the project because an option's path was
    written in the space form starts again with the ``=`` form (suite/cmdline.py says why). The outermost
    wrapper, so that this happens before pytest's capture takes over the terminal's file descriptors."""
    check_rootdir(early_config, parser, _ROOT)
    interrupts.install_sigterm_handler()  # a CI timeout's SIGTERM ends the run as Ctrl-C does (suite/interrupts.py)
    return (yield)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto --device cuda``: one worker per visible GPU (suite/fleet.py). A module-level hook, because xdist
    resolves ``auto`` in pytest_cmdline_main, before any plugin object registered at configure time exists."""
    return workers.auto_workers(config.getoption("--device"), lambda: check_device("cuda"))


def pytest_configure(config: pytest.Config) -> None:
    interrupts.configuring(config)
    configure.configure(config)  # the config, the start-up checks, the run's state and plugins (suite/configure.py)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    interrupts.note_keyboard_interrupt(excinfo)


def pytest_unconfigure(config: pytest.Config) -> None:
    lifetime = config.stash.get(LIFETIME_KEY, None)
    if lifetime is not None:
        lifetime.close()
    interrupts.unconfigure(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    state, ledger = config.stash.get(RUN_KEY, None), config.stash.get(LEDGER_KEY, None)
    if state is None or ledger is None:
        return []
    required = ", ".join(f"{e} ({why})" for e, why in sorted(state.required_by.items())) or "nothing"
    if state.left_out:
        required += "; not judged in this run, although the config requires them: " + ", ".join(
            f"{e} ({how})" for e, how in sorted(state.left_out.items()))
    accepted = ", ".join(ledger.accepted) or "no reason"
    return [f"suite: config {state.config.path}, device {config.getoption('--device')}; required engines: {required}",
            f"suite: a check may end not judged, and the run still pass, for: {accepted}"
            + ("" if config.getoption("--accept-not-judged") is not None else f" ([run] accept_not_judged in "
               f"{state.config.path.name}; --accept-not-judged overrides)")]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Every saved benchmark carries the environment it was measured in."""
    machine_info["suite_environment"] = fingerprint(config.getoption("--device"))


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """A saved pytest-benchmark run says whether the run ended; the gate refuses an incomplete baseline."""
    ledger = config.stash.get(LEDGER_KEY, None)
    interrupted = ledger.interrupted if ledger is not None else None
    output_json["suite"] = {"complete": interrupted is None, "incomplete_reason": interrupted,
                            **run_identity.run_identity(config),
                            **({"self_test_knobs": knobs} if (knobs := self_test_knobs(config)) else {})}


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
    if LIFETIME_KEY in item.config.stash:
        item.config.stash[LIFETIME_KEY].before(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After the test's fixtures are gone: engines released, peak GPU memory gated (suite/runtest.py)."""
    result = yield
    runtest.after_teardown(item, nextitem)
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    known_failures_runtime.note_records_start(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure of a test a known failure covers passes only when it is the declared one
    (suite/known_failures_runtime.py)."""
    report = yield
    known_failures_runtime.judge(item, call, report)
    return report


# =========================================================================== the verdict


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """What the user left out by request is deselected; the rest runs a model at a time (suite/collection.py)."""
    collection.select_and_order(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any test: the start-up check of every model a collected test uses (suite/preflight/), so
    that a model that cannot run is one error naming it, not a failure in each of its tests."""
    if not is_worker(session.config):
        startup_check.note_collected(session.config, [item.nodeid for item in session.items])


def pytest_internalerror(excrepr: Any, excinfo: Any) -> None:
    interrupts.note_internal_error(excrepr, excinfo)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Any:
    """The outermost wrapper: after pytest's own summary and stats line, the run ends with the verdict
    (suite/verdict_wiring.py)."""
    return (yield from verdict_wiring.finish(session))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    tr = terminalreporter
    stats = session.cache.stats
    corrupt = stats.corrupt_rebuilds
    if corrupt:
        tr.section("engine cache: corrupt entries rebuilt", sep="-", yellow=True)
        for event in corrupt:
            tr.write_line(f"{event.label}: {event.detail}")
    facts = session.engine_facts()
    if facts:
        tr.section("engines", sep="-")
        tr.write_line(f"{'cell':<44}{'size MB':>10}{'layers':>9}{'params':>12}")
        for cell_id, f in facts.items():
            size = f"{f['size_mb']:.2f}" if f.get("size_mb") is not None else "-"
            tr.write_line(f"{cell_id:<44}{size:>10}{f.get('layers') or '-':>9}{f.get('parameters') or '-':>12}")
    rebuilds = [r for r in session.records if r.get("kind") == "rebuild"]
    if rebuilds:
        tr.section("rebuild check (--rebuild-check)", sep="-")
        for r in rebuilds:
            same = r["identical_outputs"] and r["identical_artifacts"] in (True, None)
            tr.write_line(describe_rebuild(r["cell"], r), yellow=not same)
    phases = config.pluginmanager.get_plugin("suite-fleet").phases()  # type: ignore[union-attr]
    if phases:
        workers = config.pluginmanager.get_plugin("suite-fleet").worker_seconds()  # type: ignore[union-attr]
        tr.write_line("time per phase: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
                      + (f" (summed over {len(workers)} workers: " + ", ".join(f"{w} {t:.1f} s" for w, t in
                                                                              workers.items()) + ")"
                         if workers else ""))
    worker_time = config.pluginmanager.get_plugin("suite-fleet").timeline.summary()  # type: ignore[union-attr]
    if worker_time:
        tr.write_line(worker_time)
    cpus = config.pluginmanager.get_plugin("suite-fleet").worker_cpus  # type: ignore[union-attr]
    if cpus:
        tr.write_line("worker CPU shares: " + "; ".join(f"{w} {c['cpus']}, {c['threads'] or 'default'} threads"
                                                        for w, c in sorted(cpus.items())))
    memory = memory_summary(session.records)
    if memory:
        tr.write_line(memory)
    for line in collection.not_collected_lines(config):
        tr.write_line(line)
    path = config.getoption("--suite-results")
    if path:
        tr.write_line(f"suite results written to {path}")
    tr.write_line(stats.summary_line())
