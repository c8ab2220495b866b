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

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from core.cache import ArtifactCache, CacheEvent, CacheUnusable
from suite import (
    benchmark_files,
    collection,
    fleet,
    interrupts,
    junit,
    known_failures_runtime,
    options,
    parametrize,
    run_identity,
    runtest,
    scheduling,
    startup_check,
    verdict,
    workers,
)
from suite.baseline_environment import current_fingerprint, difference_block
from suite.cmdline import check_rootdir
from suite.config import (
    ENGINES,
    ConfigError,
    SuiteConfig,
    check_rounds_option,
    load_config,
    parse_batch_sizes_option,
)
from suite.device import DeviceError, check_device
from suite.environment import fingerprint
from suite.gate.coverage import benchmark_compared
from suite.gate.state import gate_of, self_test_knobs
from suite.gpu_memory import memory_summary
from suite.lifetime import EngineLifetime
from suite.preflight import PROGRESS_PREFIX
from suite.rebuild import describe as describe_rebuild
from suite.results import merge_streamed, results_document, write_json_atomic
from suite.session import REFERENCE_ENGINE, SuiteSession
from suite.state import (
    DIFFERENCE_KEY,
    LEDGER_KEY,
    LIFETIME_KEY,
    RUN_INFO_KEY,
    RUN_KEY,
    SESSION_KEY,
    VERDICT_KEY,
    RunState,
    ledger_of,
    suite_session,
)
from suite.summary import print_verdict
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
    for name, text in (
        ("accuracy", "top-1/top-5 on labelled data against thresholds and the PyTorch reference"),
        ("parity", "output agreement with the PyTorch reference on the same inputs"),
        ("latency", "pytest-benchmark latency/throughput cases (gate with --latency-baseline)"),
        ("rebuild", "--rebuild-check N: each engine built N times from scratch; collected only with the option"),
    ):
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.option.verbose < 2:
        # On CI (the CI variable set), pytest's short summary repeats each failure's whole message; a parity
        # failure's message, with its localization and bisect tables, is 30 lines the long report just gave.
        # One line per failure there, as pytest prints off CI; -vv still prints it whole.
        config.option.force_short_summary = True
    engines_option = options.split_list(config.getoption("--engines"))
    try:
        loaded = load_config(config.getoption("--suite-config"))
    except ConfigError as exc:
        raise pytest.UsageError(f"suite config: {exc}") from exc
    try:  # --models/--engines/--precisions: the option's error, not the config's
        suite_config = loaded.select(options.split_list(config.getoption("--models")), engines_option,
                                     options.split_list(config.getoption("--precisions")))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc
    try:
        if config.getoption("--latency-batch-sizes") is not None:
            parse_batch_sizes_option(config.getoption("--latency-batch-sizes"), suite_config.models)
        if config.getoption("--latency-rounds") is not None:
            check_rounds_option(config.getoption("--latency-rounds"))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc
    options.check_options(config, suite_config)
    device = config.getoption("--device")
    requires = suite_config.requires
    try:
        gpus = check_device(device)
    except DeviceError as exc:
        raise pytest.UsageError(str(exc)) from exc
    numprocesses = config.getoption("numprocesses", None)
    why = workers.check_workers(device, numprocesses, gpus)
    if why:
        raise pytest.UsageError(why)
    if numprocesses and (config.getoption("benchmark_compare", None) or config.getoption("benchmark_compare_fail",
                                                                                           None)):
        raise pytest.UsageError("--benchmark-compare/--benchmark-compare-fail compare in one process; under xdist "
                                "use the suite's gate, --latency-baseline (docs/gating.md)")
    if device == "cuda" and not is_worker(config):
        os.environ[workers.WORKER_GPUS_ENV] = ",".join(workers.visible_gpus(gpus))  # read by each worker at import
    if device == "cuda" or workers.BOUND_GPU is not None:
        device = "cuda:0"  # every visible GPU (one per worker: its own GPU is its cuda:0)
    if "cuda" in requires and not device.startswith("cuda"):
        raise pytest.UsageError(f"{suite_config.path.name} requires a CUDA device ([run] requires); run with "
                                "--device cuda:0")
    accept = config.getoption("--accept-not-judged")
    try:
        accepted = (verdict.check_reasons(accept.split(","), "--accept-not-judged") if accept is not None
                    else suite_config.accept_not_judged)
    except verdict.NotJudgedReasonError as exc:
        raise pytest.UsageError(str(exc)) from exc
    required_by, left_out = required_engines(loaded, suite_config, engines_option)
    state = RunState(suite_config, set(required_by), required_by)
    state.left_out = left_out
    config.stash[RUN_KEY] = state
    config.stash[LEDGER_KEY] = verdict.Ledger(accepted=accepted)
    config.pluginmanager.register(_VerdictPlugin(config), "suite-verdict")
    if not is_worker(config):
        junit.register(config)  # --junitxml counts as the verdict (suite/junit.py)
    config.pluginmanager.register(fleet.FleetPlugin(config, gpus, startup_check.note_collected), "suite-fleet")

    for noisy in ("onnxscript", "onnx_ir", "torch.onnx", "torch._dynamo", "torch.export"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    def on_event(event: CacheEvent) -> None:
        """Progress on long builds, live, whatever pytest's capture mode."""
        if event.action == "start":
            text = f"building {event.label} ..."
            if event.detail:
                text = f"corrupt entry ({event.detail}); rebuilding {event.label} ..."
        elif event.action in ("build", "rebuild-corrupt"):
            text = f"built {event.label} in {event.seconds:.1f} s"
        elif event.action == "wait":
            text = f"waiting: {event.detail or event.label}"
        else:
            return
        startup_check.progress(config, text, logged=f"{PROGRESS_PREFIX} {text}")

    cache = ArtifactCache(config.getoption("--engine-cache"), on_event=on_event)
    try:
        cache.ensure_usable()
    except CacheUnusable as exc:
        raise pytest.UsageError(f"--engine-cache: {exc}") from exc
    _keep_writes_inside(cache.root)
    if config.getoption("benchmark_storage", None) == "file://./.benchmarks":  # pytest-benchmark's cwd default
        config.option.benchmark_storage = f"file://{_ROOT / '.benchmarks'}"  # the project's, whatever the cwd
    session = SuiteSession(suite_config, cache, device)
    results = config.getoption("--suite-results")
    if results:
        session.stream_records_to(Path(f"{results}.partial.jsonl"))
    config.stash[SESSION_KEY] = session
    config.stash[LIFETIME_KEY] = EngineLifetime(session, list(suite_config.models), options.overhead_model(config))
    workers.take_thread_share(session)


def required_engines(loaded: SuiteConfig, selected: SuiteConfig,
                     engines_option: list[str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """The engines this run must judge, each with why ({engine: why}), and the config's required engines it
    leaves out, each with how ({engine: how}), said in the header and the results' verdict.

    An engine named with --engines is required, and must be listed by some selected model: one that no selected
    model lists would never be judged (a usage error). A config-required engine ([run] requires) is required
    unless the run narrows it away in the open: an explicit --engines that does not name it, or --models that
    selects no model listing it. Nothing else narrows it: a -k or -m that collects none of its checks fails the
    run (_required_engines_judged)."""
    listed = {e for m in selected.models.values() for e in m.engines}
    for engine in engines_option or ():
        if engine not in listed:
            engines = "; ".join(f"{n}: {', '.join(loaded.models[n].engines)}" for n in selected.models)
            raise pytest.UsageError(f"--engines {','.join(engines_option or ())}: no selected model lists {engine}, "
                                    f"so it would never be judged (the models' engines: {engines})")
    required_by: dict[str, str] = {}
    left_out: dict[str, str] = {}
    for engine in (e for e in selected.requires if e != "cuda"):
        if engines_option and engine not in engines_option:
            left_out[engine] = f"left out by --engines {','.join(engines_option)}"
        elif engine not in listed:
            left_out[engine] = f"no selected model lists it ({', '.join(selected.models)})"
        else:
            required_by[engine] = f"[run] requires in {selected.path.name}"
    required_by.update({e: "--engines" for e in engines_option or ()})
    return required_by, left_out


def _keep_writes_inside(cache_root: Path) -> None:
    """Nothing written outside the project, the engine cache and the benchmark storage: inductor's and
    triton's caches and matplotlib's config go into the engine cache (before torch._dynamo's import makes
    its directory; ONNX Runtime's telemetry is off from this module's import, above), and hypothesis's
    database into the project."""
    from hypothesis.configuration import set_hypothesis_home_dir

    from engines.inductor.backend import inductor_cache_env

    os.environ.update(inductor_cache_env(cache_root))
    os.environ.setdefault("MPLCONFIGDIR", str(cache_root.resolve() / "matplotlib"))
    set_hypothesis_home_dir(_ROOT / ".hypothesis")  # its examples database and caches, whatever the cwd


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


class _VerdictPlugin:
    """Reports into the ledger and settles the verdict; one per run, registered in pytest_configure."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.known: dict[str, dict[str, int]] = {}  # known-failure entry -> {"as declared": n, "passed": n}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if is_worker(self.config):
            return
        ledger_of(self.config).add_report(report)
        for key in (v for k, v in report.user_properties if k == known_failures_runtime.KNOWN_PROPERTY):
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
        if config.option.collectonly:
            return  # --collect-only judges nothing, by request: pytest's status stands
        ledger = ledger_of(config)
        stopped = {pytest.ExitCode.INTERRUPTED: "interrupted", pytest.ExitCode.USAGE_ERROR: "stopped by a usage error",
                   pytest.ExitCode.INTERNAL_ERROR: "stopped by an internal error"}.get(exitstatus)  # type: ignore[call-overload]
        if ledger.interrupted or stopped:
            ledger.mark_interrupted(ledger.interrupted or str(stopped), config.stash[RUN_KEY].collected)
        _take_benchmark_regressions(config, ledger)
        _required_engines_judged(config.stash[RUN_KEY], ledger)
        self._strict_known_failures(ledger)
        _count_as_the_verdict(config, ledger)
        junit.settle(config, ledger)  # before pytest's junitxml writes its file (a plain hook, after this one)
        session.exitstatus = ledger.exit_status(int(session.exitstatus))
        config.stash[VERDICT_KEY] = ledger.as_dict()  # read by report/plugin.py
        info = config.stash[RUN_INFO_KEY] = run_identity.run_info(config)
        suite = suite_session(config)
        environment = fleet.run_environment(config)
        gate = gate_of(config)
        difference = config.stash[DIFFERENCE_KEY] = difference_block(
            current_fingerprint(environment, info), gate.baseline_fingerprints() if gate is not None else [])
        knobs = self_test_knobs(config)
        if plugin.benchmarks:  # an xdist run: the one pytest-benchmark file, from every worker's cases
            with _unwritten(config, ledger, "pytest-benchmark's JSON", "the merged file"):
                benchmark_files.write_benchmark_json(config, plugin.benchmarks, environment,
                                                     ledger.interrupted is None, ledger.interrupted, knobs,
                                                     {k: info[k] for k in ("git_commit", "config_digest")})
        try:
            scheduling.save_durations(suite.cache.root, plugin.clock.per_unit)
        except OSError as exc:  # only the next run's scheduling order needs it
            log.warning("the per-cell durations for the next run's scheduling were not saved: %s", exc)
        path = config.getoption("--suite-results")
        if path:
            records = suite.records
            if ledger.interrupted:  # xdist workers stopped before sending theirs: what they streamed survives
                records = merge_streamed(records, Path(f"{path}.partial.jsonl"))
            with _unwritten(config, ledger, "--suite-results", path):
                write_json_atomic(path, results_document(
                    environment=environment, records=records, engines=suite.engine_facts(),
                    verdict=config.stash[VERDICT_KEY], complete=ledger.interrupted is None,
                    incomplete_reason=ledger.interrupted, run=info, baseline_environment=difference,
                    self_test_knobs=knobs))
        for what, where, error in benchmark_files.unwritten_benchmark_files(config):
            _file_not_written(config, ledger, what, where, error)
        session.exitstatus = ledger.exit_status(int(session.exitstatus))  # a file not written fails the run


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Any:
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
        _file_not_written(session.config, ledger, "the HTML report", str(getattr(session.config.option, "htmlpath",
                                                                                  None) or "?"), exc)
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
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"suite: {text}", red=True)


def _interrupted_while_writing(config: pytest.Config, why: str) -> None:
    """An interruption after every test, while the run's files were written: the verdict still ends the run,
    after one line on what may be missing (the results file is written first, before pytest-html renders)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    html = getattr(config.option, "htmlpath", None)
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
    required engines only with --engines or --models (required_engines). The config's engines this run left
    out are recorded with the verdict."""
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


def _take_benchmark_regressions(config: pytest.Config, ledger: verdict.Ledger) -> None:
    """pytest-benchmark's --benchmark-compare-fail raises a bare PerformanceRegression from its terminal
    summary (a traceback, and no 'N passed' line). Its findings become failed checks of the verdict
    instead, listed with the rest; see docs/gating.md 'Two gates' for how it compares with --latency-baseline.
    A case it had nothing to compare with is not judged (no-baseline), as with the suite's own gate."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is None or not getattr(bench, "compare_fail", None):
        return
    compared = benchmark_compared(bench)
    for case in bench.benchmarks:
        if case and case.fullname not in compared:
            ledger.add_component(case.fullname, verdict.Component(
                "pytest-benchmark --benchmark-compare-fail", verdict.NOT_JUDGED, "no-baseline",
                f"the compared run ({config.getoption('benchmark_compare')}) has no case named {case.fullname}"))
    found = list(bench.performance_regressions or [])
    bench.performance_regressions.clear()
    for name, failure in found:
        ledger.add(f"pytest-benchmark --benchmark-compare-fail: {name}", verdict.FAILED,
                   detail=f"Performance has regressed: {failure}")


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
