"""The run's start (pytest_configure): the config read and narrowed by the options, every start-up check of the
command line (device, workers, not-judged reasons, the engine cache), the run's state under suite/state.py's keys,
the suite's plugin objects registered (the verdict's, the junit file's, the fleet's), and nothing written outside the
project, the engine cache and the benchmark storage.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from core.cache import ArtifactCache, CacheUnusable
from core.cache_stats import CacheEvent
from suite import options, verdict
from suite.config import (
    ConfigError,
    SuiteConfig,
    check_rounds_option,
    load_config,
    parse_batch_sizes_option,
)
from suite.device import WORKER_GPUS_ENV, DeviceError, check_device
from suite.fleet import workers
from suite.fleet.plugin import FleetPlugin
from suite.fleet.workers import is_worker
from suite.gate.cpu_meter import SUITE_RUN_PID_ENV
from suite.hooks import junit, startup_check, verdict_wiring
from suite.lifetime import EngineLifetime
from suite.preflight import PROGRESS_PREFIX
from suite.session import SuiteSession
from suite.state import LEDGER_KEY, LIFETIME_KEY, RUN_KEY, SESSION_KEY, RunState

_ROOT = Path(__file__).resolve().parent.parent.parent


def configure(config: pytest.Config) -> None:
    """pytest_configure's work, once a SIGTERM during start-up has had its say (suite/hooks/interrupts.py)."""
    _add_markers(config)
    given = options.options_of(config)  # the run's options, read once (suite/options.py)
    if given.verbose < 2:
        # On CI (the CI variable set), pytest's short summary repeats each failure's whole message; a parity
        # failure's message, with its localization and bisect tables, is 30 lines the long report just gave.
        # One line per failure there, as pytest prints off CI; -vv still prints it whole.
        config.option.force_short_summary = True
    loaded, suite_config, engines_option = _selected_config(config)
    device, gpus = _checked_device(config, suite_config)
    accept = given.accept_not_judged
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
    config.pluginmanager.register(verdict_wiring.VerdictPlugin(config), "suite-verdict")
    if not is_worker(config):
        junit.register(config)  # --junitxml counts as the verdict (suite/hooks/junit.py)
    config.pluginmanager.register(FleetPlugin(config, gpus, startup_check.note_collected, startup_check.check_early),
                                  "suite-fleet")

    for noisy in ("onnxscript", "onnx_ir", "torch.onnx", "torch._dynamo", "torch.export"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cache = _engine_cache(config)
    if given.benchmark_storage is not None:  # its cwd default made the project's, whatever the cwd (suite/options.py)
        config.option.benchmark_storage = given.benchmark_storage
    session = SuiteSession(suite_config, cache, device)
    results = given.suite_results
    if results:
        session.stream_records_to(Path(f"{results}.partial.jsonl"))
    config.stash[SESSION_KEY] = session
    config.stash[LIFETIME_KEY] = EngineLifetime(session, list(suite_config.models), options.overhead_model(config))
    workers.take_thread_share(session)


def _add_markers(config: pytest.Config) -> None:
    for name, text in (
        ("accuracy", "top-1/top-5 on labelled data against thresholds and the PyTorch reference"),
        ("parity", "output agreement with the PyTorch reference on the same inputs"),
        ("latency", "pytest-benchmark latency/throughput cases (gate with --latency-baseline)"),
        ("rebuild", "--rebuild-check N: each engine built N times from scratch; collected only with the option"),
    ):
        config.addinivalue_line("markers", f"{name}: {text}")


def _selected_config(config: pytest.Config) -> tuple[SuiteConfig, SuiteConfig, list[str] | None]:
    """(the config as read, the config narrowed by --models/--engines/--precisions, --engines' list), with the
    options checked against it: the config file's errors, then the options'."""
    given = options.options_of(config)
    engines_option = options.split_list(given.engines)
    try:
        loaded = load_config(given.suite_config)
    except ConfigError as exc:
        raise pytest.UsageError(f"suite config: {exc}") from exc
    try:  # --models/--engines/--precisions: the option's error, not the config's
        suite_config = loaded.select(options.split_list(given.models), engines_option,
                                     options.split_list(given.precisions))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc
    try:
        if given.latency_batch_sizes is not None:
            parse_batch_sizes_option(given.latency_batch_sizes, suite_config.models)
        if given.latency_rounds is not None:
            check_rounds_option(given.latency_rounds)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc
    options.check_options(config, suite_config)
    return loaded, suite_config, engines_option


def _checked_device(config: pytest.Config, suite_config: SuiteConfig) -> tuple[str, int]:
    """The run's device, normalised (``cuda`` -> ``cuda:0``, suite/options.py), and the visible GPUs: the device as
    written checked against the workers, the config's ``[run] requires`` and pytest-benchmark's comparisons (one
    process only); the run's root process and each worker's GPUs noted in the environment."""
    given = options.options_of(config)
    device = given.device_requested
    requires = suite_config.requires
    try:
        gpus = check_device(device)
    except DeviceError as exc:
        raise pytest.UsageError(str(exc)) from exc
    numprocesses = given.numprocesses
    why = workers.check_workers(device, numprocesses, gpus)
    if why:
        raise pytest.UsageError(why)
    if numprocesses and (given.benchmark_compare or given.benchmark_compare_fail):
        raise pytest.UsageError("--benchmark-compare/--benchmark-compare-fail compare in one process; under xdist "
                                "use the suite's gate, --latency-baseline (docs/gating.md)")
    if not is_worker(config):  # the run's root: its process tree is never "other processes" (suite/gate/cpu_meter.py)
        os.environ[SUITE_RUN_PID_ENV] = str(os.getpid())
    if device == "cuda" and not is_worker(config):
        os.environ[WORKER_GPUS_ENV] = ",".join(workers.visible_gpus(gpus))  # read by each worker at import
    device = given.device  # cuda: every visible GPU (one per worker: its own GPU is its cuda:0)
    if "cuda" in requires and not device.startswith("cuda"):
        raise pytest.UsageError(f"{suite_config.path.name} requires a CUDA device ([run] requires); run with "
                                "--device cuda:0")
    return device, gpus


def _engine_cache(config: pytest.Config) -> ArtifactCache:
    """The --engine-cache, checked usable, its long builds said live; nothing written outside it from here on."""

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

    cache = ArtifactCache(options.options_of(config).engine_cache, on_event=on_event)
    try:
        cache.ensure_usable()
    except CacheUnusable as exc:
        raise pytest.UsageError(f"--engine-cache: {exc}") from exc
    _keep_writes_inside(cache.root)
    return cache


def required_engines(loaded: SuiteConfig, selected: SuiteConfig,
                     engines_option: list[str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """The engines this run must judge, each with why ({engine: why}), and the config's required engines it
    leaves out, each with how ({engine: how}), said in the header and the results' verdict.

    An engine named with --engines is required, and must be listed by some selected model: one that no selected
    model lists would never be judged (a usage error). A config-required engine ([run] requires) is required
    unless the run narrows it away in the open: an explicit --engines that does not name it, or --models that
    selects no model listing it. Nothing else narrows it: a -k or -m that collects none of its checks fails the
    run (suite/hooks/verdict_wiring.py _required_engines_judged)."""
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
    its directory; ONNX Runtime's telemetry is off from suite/plugin.py's import), and hypothesis's database
    into the project."""
    from hypothesis.configuration import set_hypothesis_home_dir

    from engines.inductor.backend import inductor_cache_env

    os.environ.update(inductor_cache_env(cache_root))
    os.environ.setdefault("MPLCONFIGDIR", str(cache_root.resolve() / "matplotlib"))
    set_hypothesis_home_dir(_ROOT / ".hypothesis")  # its examples database and caches, whatever the cwd
