"""The verdict's wiring into pytest: every test's report into the ledger (suite/verdict.py), the terminal's counts as
the verdict has them, and at the session's end the verdict settled (benchmark regressions, required engines, strict
known failures), the exit status, the results and benchmark files written (a file not written is a failed check),
and the verdict block printed last (suite/hooks/summary.py). VerdictPlugin is registered at configure time
(suite/hooks/configure.py); suite/plugin.py's pytest_sessionfinish wrapper delegates to ``finish``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from suite import verdict
from suite.config import ENGINES, SuiteConfig, threshold_changes
from suite.fleet import benchmark_files, scheduling
from suite.fleet.plugin import run_environment, worker_layout
from suite.fleet.workers import is_worker
from suite.gate import benchmark_compare
from suite.gate.baseline_environment import current_fingerprint, difference_block
from suite.gate.state import gate_of, self_test_knobs
from suite.hooks import census_record, junit, run_identity
from suite.hooks.known_failures_runtime import KNOWN_PROPERTY
from suite.hooks.summary import print_verdict
from suite.options import options_of
from suite.results import merge_streamed, results_document, write_json_atomic
from suite.session import REFERENCE_ENGINE
from suite.state import (
    DIFFERENCE_KEY,
    LEDGER_KEY,
    RUN_INFO_KEY,
    RUN_KEY,
    VERDICT_KEY,
    RunState,
    ledger_of,
    suite_session,
)

log = logging.getLogger("suite")


class VerdictPlugin:
    """Reports into the ledger and settles the verdict; one per run, registered in pytest_configure."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.known: dict[str, dict[str, int]] = {}  # known-failure entry -> {"as declared": n, "passed": n}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if is_worker(self.config):
            return
        ledger_of(self.config).add_report(report)
        for key in (v for k, v in report.user_properties if k == KNOWN_PROPERTY):
            seen = self.known.setdefault(key, {"as declared": 0, "passed": 0})
            if hasattr(report, "wasxfail"):
                seen["as declared"] += 1
            elif report.when == "call" and report.passed:
                seen["passed"] += 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, Any] | None:
        """A test whose check ended not judged is counted 'not judged' in pytest's stats line and shown so (-v's word,
        the progress letter 's' for a skip, 'n' for a test that ran while its gate could not judge), never 'passed'
        or 'skipped': the line's counts are the verdict's. Only the terminal's category: the report's outcome, which
        the ledger and pytest-xdist read, is pytest's."""
        if verdict.start_up_failure(report):  # its model failed the start-up check: a failed check, not an error
            return "failed", "F", ("FAILED", {"red": True})
        check = verdict.check_of_report(report)
        if check is None or check.state != verdict.NOT_JUDGED:
            return None
        return verdict.NOT_JUDGED, "s" if report.skipped else "n", ("NOT JUDGED", {"yellow": True})

    def _strict_known_failures(self, ledger: verdict.Ledger) -> None:
        """An entry none of whose tests failed as declared (and some passed): the engine was fixed."""
        for key, seen in sorted(self.known.items()):
            if not seen["as declared"] and seen["passed"]:
                ledger.add(f"known failure {key}", verdict.FAILED,
                           detail=f"[XPASS(strict)] all {seen['passed']} tests this known failure covers passed: the "
                                  "engine was fixed; remove the entry from known_failures")

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        ledger_of(self.config).interrupted = str(excinfo.value) or "SIGINT (Ctrl-C)"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """A plain hook, first among plain ones: after pytest-benchmark's finish (a wrapper) has compared,
        before pytest-html renders. Settles the verdict, the exit code and the results file."""
        config = self.config
        plugin = config.pluginmanager.get_plugin("suite-fleet")
        if is_worker(config):
            config.workeroutput["suite"] = plugin.worker_output()  # type: ignore[attr-defined]
            return
        if config.option.collectonly:  # --collect-only judges nothing, by request: pytest's status stands
            _no_results_file(config)
            return
        ledger = ledger_of(config)
        stopped = {pytest.ExitCode.INTERRUPTED: "interrupted", pytest.ExitCode.USAGE_ERROR: "stopped by a usage error",
                   pytest.ExitCode.INTERNAL_ERROR: "stopped by an internal error"}.get(exitstatus)  # type: ignore[call-overload]
        if ledger.interrupted or stopped:
            ledger.mark_interrupted(ledger.interrupted or str(stopped), config.stash[RUN_KEY].collected)
        benchmark_compare.take_regressions(config, ledger)
        if (gate := gate_of(config)) is not None:  # a whole group slower: once every worker's cases are in
            gate.take_group_drifts(ledger)
        _required_engines_judged(config.stash[RUN_KEY], ledger)
        ledger.thresholds = thresholds_not_default(config.stash[RUN_KEY].config)
        self._strict_known_failures(ledger)
        _count_as_the_verdict(config, ledger)
        junit.settle(config, ledger)  # before pytest's junitxml writes its file (a plain hook, after this one)
        session.exitstatus = ledger.exit_status(int(session.exitstatus))
        config.stash[VERDICT_KEY] = ledger.as_dict()  # read by report/plugin.py
        info = config.stash[RUN_INFO_KEY] = run_identity.run_info(config)
        suite = suite_session(config)
        environment = run_environment(config)
        gate = gate_of(config)
        if gate is not None:  # the spread is known now that the workers reported: the gate's warning compares it
            gate.environment = {**gate.environment, **worker_layout(config)}
        difference = config.stash[DIFFERENCE_KEY] = difference_block(
            current_fingerprint(environment, info), gate.baseline_fingerprints() if gate is not None else [])
        knobs = self_test_knobs(config)
        if plugin.benchmarks:  # an xdist run: the one pytest-benchmark file, from every worker's cases
            with _unwritten(config, ledger, "pytest-benchmark's JSON", "the merged file"):
                benchmark_files.write_benchmark_json(config, plugin.benchmarks, environment,
                                                     ledger.interrupted is None, ledger.interrupted, knobs,
                                                     {k: info[k] for k in run_identity.IDENTITY_KEYS if k in info})
        try:
            scheduling.save_durations(suite.cache.root, plugin.clock.per_unit)
        except OSError as exc:  # only the next run's scheduling order needs it
            log.warning("the per-cell durations for the next run's scheduling were not saved: %s", exc)
        try:  # what the next run's collection leaves out (suite/hooks/census_record.py)
            census_record.save(suite, suite.engine_facts())
        except OSError as exc:  # the next run then collects those cells, and judges them as this one did
            log.warning("the cells' precision census for the next run's collection was not saved: %s", exc)
        path = options_of(config).suite_results
        if path:
            records = suite.records
            if ledger.interrupted:  # xdist workers stopped before sending theirs: what they streamed survives
                records = merge_streamed(records, Path(f"{path}.partial.jsonl"))
            document = results_document(
                environment=environment, records=records, engines=suite.engine_facts(),
                verdict=config.stash[VERDICT_KEY], complete=ledger.interrupted is None,
                incomplete_reason=ledger.interrupted, run=info, baseline_environment=difference,
                self_test_knobs=knobs)
            with _unwritten(config, ledger, "--suite-results", path):
                write_json_atomic(path, document)
                config.stash[RUN_KEY].results_written = (path, document)
        for what, where, error in benchmark_files.unwritten_benchmark_files(config):
            _file_not_written(config, ledger, what, where, error)
        session.exitstatus = ledger.exit_status(int(session.exitstatus))  # a file not written fails the run


def _no_results_file(config: pytest.Config) -> None:
    """--collect-only writes no --suite-results file: an earlier run's file there would read as this run's (the
    summary once said 'suite results written to X' over yesterday's X), so it is removed, saying so."""
    path = options_of(config).suite_results
    if not path:
        return
    state = config.stash[RUN_KEY]
    stream = Path(f"{path}.partial.jsonl")  # the record stream configure opened: this run streamed nothing
    if stream.is_file() and not stream.stat().st_size:
        stream.unlink()
    if not Path(path).exists():
        state.results_note = f"suite results: none written to {path} (--collect-only judges nothing)"
        return
    try:
        Path(path).unlink()
    except OSError as exc:
        state.results_note = (f"suite results: none written to {path} (--collect-only judges nothing), and the earlier "
                              f"run's file there could not be removed ({exc.strerror or exc}): it is not this run's")
        return
    state.results_note = (f"suite results: none written to {path} (--collect-only judges nothing); the earlier run's "
                          "file there was removed, so that nothing reads it as this run's")


def finish(session: pytest.Session) -> Generator[None, Any, Any]:
    """The outermost wrapper: after pytest's own summary and stats line, the run ends with the verdict.
    Before the others: a case interrupted mid-measurement leaves pytest-benchmark an empty benchmark, on
    which its JSON writer crashes (min() of nothing); a case without rounds is not saved."""
    bench = getattr(session.config, "_benchmarksession", None)
    if bench is not None and getattr(bench, "benchmarks", None):
        bench.benchmarks[:] = [b for b in bench.benchmarks if b]
    cut_short = None
    try:
        result = yield
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM while the plugins below wrote their files
        result, cut_short = None, str(exc) or "SIGINT (Ctrl-C)"
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    except OSError as exc:  # pytest-html could not write its report (a full disk): one line, a failed check
        if LEDGER_KEY not in session.config.stash or is_worker(session.config):
            raise
        result, ledger = None, ledger_of(session.config)
        _file_not_written(session.config, ledger, "the HTML report", str(options_of(session.config).htmlpath or "?"),
                          exc)
        session.exitstatus = ledger.exit_status(int(session.exitstatus))
    stopped_early = (session.exitstatus in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR)
                     or session.config.option.collectonly)  # --collect-only judges nothing, by request
    if not is_worker(session.config) and LEDGER_KEY in session.config.stash and not stopped_early:
        if cut_short is not None:
            _interrupted_while_writing(session.config, cut_short)
        print_verdict(session.config)  # (a usage error's own ERROR line is the last word: nothing was judged)
    return result


@contextlib.contextmanager
def _unwritten(config: pytest.Config, ledger: verdict.Ledger, what: str, where: str) -> Any:
    """A file the run was asked to write and could not (a full disk): one line and a failed run-level check, and
    the files after it are still written (the HTML report)."""
    try:
        yield
    except OSError as exc:
        _file_not_written(config, ledger, what, where, exc)


def _file_not_written(config: pytest.Config, ledger: verdict.Ledger, what: str, where: str,
                      error: OSError) -> None:
    text = f"{what} {where} was not written: {error.strerror or error}"
    ledger.add(f"{what} written", verdict.FAILED, detail=text)
    config.stash[VERDICT_KEY] = ledger.as_dict()  # the report says so too
    config.stash[RUN_KEY].unwritten.append(text)
    lines = [text, *_results_settled_again(config.stash[RUN_KEY], config.stash[VERDICT_KEY])]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(f"suite: {line}", red=True)


def _results_settled_again(state: RunState, settled: dict[str, Any]) -> list[str]:
    """A file that failed after the --suite-results file was written (the HTML report on a full disk) changed the
    verdict that file holds: it is written again with the final verdict, or, where that fails too, removed (a results
    file saying 'passed' of a failed run would become tomorrow's baseline). What happened, in words, if anything."""
    if state.results_written is None:
        return []
    path, document = state.results_written
    try:
        write_json_atomic(path, {**document, "verdict": settled})
    except OSError as exc:
        state.results_written = None
        with contextlib.suppress(OSError):
            Path(path).unlink()
        return [f"--suite-results {path} could not take the final verdict ({exc.strerror or exc}), so it was removed "
                "rather than left saying the run's earlier verdict"]
    state.results_written = (path, {**document, "verdict": settled})
    return []


def _interrupted_while_writing(config: pytest.Config, why: str) -> None:
    """An interruption after every test, while the run's files were written: the verdict still ends the run,
    after one line on what may be missing (the results file is written first, before pytest-html renders)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    html = options_of(config).htmlpath
    if reporter is not None:
        reporter.write_line(f"suite: interrupted ({why}) while the run's files were written, after every test: "
                            + (f"the HTML report {html} may be missing or old; " if html else "")
                            + "the verdict below stands for the tests; the exit status is 2 (interrupted)",
                            yellow=True)


def _count_as_the_verdict(config: pytest.Config, ledger: verdict.Ledger) -> None:
    """A test pytest counted 'passed' whose check a comparison made after the last test left not judged
    (pytest-benchmark's compare: a case the compared run lacks) is counted 'not judged' in the stats line printed
    next, as the verdict has it (pytest_report_teststatus counted the others as they came)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    passed = reporter.stats.get("passed", [])
    late = [r for r in passed if r.when == "call" and r.nodeid in ledger.checks
            and ledger.checks[r.nodeid].state == verdict.NOT_JUDGED]
    if late:
        reporter.stats["passed"] = [r for r in passed if r not in late]
        reporter._add_stats(verdict.NOT_JUDGED, late)  # pytest's own bookkeeping: the line's colour follows


def _required_engines_judged(state: RunState, ledger: verdict.Ledger) -> None:
    """A required engine none of whose collected checks could run (e.g. ``--engines tensorrt`` on a CPU,
    where every cell is 'unsupported') fails the run: it was asked for by name and ran nowhere. So does one none
    of whose checks was collected at all (-k, -m), in a run that collected checks of engines: a run narrows its
    required engines only with --engines or --models (suite/hooks/configure.py required_engines). The config's engines
    this run left out are recorded with the verdict."""
    ledger.left_out = dict(state.left_out)
    by_engine: dict[str, list[str]] = {}
    for nodeid in state.collected:
        engine = _engine_of(nodeid, state.config)
        if engine is not None:
            by_engine.setdefault(engine, []).append(nodeid)
    for engine, why in sorted(state.required_by.items()):
        if engine == REFERENCE_ENGINE and any(c.state != verdict.NOT_JUDGED for c in ledger.checks.values()
                                              if "/test_accuracy.py::" in c.id or "/test_parity.py::" in c.id):
            continue  # torch ran as the reference of every judged accuracy and parity check
        ids = by_engine.get(engine, [])
        if not ids and by_engine and not ledger.interrupted:
            ledger.add(f"required engine {engine}", verdict.FAILED,
                       detail=f"{engine} is required ({why}) and none of its checks was collected (-k or -m left "
                              "them all out); to leave a required engine out, name the engines to run with --engines")
            continue
        ledger.require(f"engine {engine}", ids, f"{engine} is required ({why})")


def thresholds_not_default(config: SuiteConfig) -> dict[str, list[str]]:
    """Each selected model's precisions whose thresholds differ from the precision's defaults, and how."""
    out = {}
    for model in config.models.values():
        for precision in model.precisions:
            changes = threshold_changes(precision, model.tolerance(precision).as_dict(),
                                        dataclasses.asdict(model.accuracy_threshold(precision)))
            if changes:
                out[f"{model.name} {precision}"] = changes
    return out


def _engine_of(nodeid: str, config: SuiteConfig) -> str | None:
    """The engine whose check this test is: its parameters start with a selected model's cell
    (``MODEL-ENGINE-PRECISION``, Cell.id), as the accuracy, parity and latency tests' do; None for any other test
    (the suite's self-tests, the harness-overhead check)."""
    param = nodeid.partition("[")[2]
    for model in sorted(config.models, key=len, reverse=True):
        if param.startswith(model + "-"):
            engine = param[len(model) + 1:].partition("-")[0]
            return engine if engine in ENGINES else None
    return None
