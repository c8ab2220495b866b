"""One pytest-xdist worker per GPU, and one result from many workers: the xdist hooks.

Each worker is bound to its GPU (suite/device.py) and its cores (suite/fleet/workers.py) at import;
suite/fleet/scheduling.py hands the work out a cell at a time; suite/fleet/timeline.py keeps where the time went;
suite/fleet/benchmark_files.py writes pytest-benchmark's files.

Each worker sends what it produced when it ends (xdist's ``workeroutput``): records, engine facts,
cache statistics, the gate's comparisons, pytest-benchmark's cases and time per phase. The controller
adds them up, so a run under xdist still writes one --suite-results file, one pytest-benchmark JSON
(a valid baseline), one HTML report and one ``engine cache:`` line. Test outcomes and the verdict's
components travel on the test reports themselves (suite/verdict.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from engines import get_backend
from suite.device import BOUND_GPU, WORKER_GPUS_ENV
from suite.environment import fingerprint
from suite.fleet.benchmark_files import atomic_benchmark_files
from suite.fleet.scheduling import _scheduler_class, load_durations, model_kinship, work_per_model, work_unit_of
from suite.fleet.timeline import PHASES, PhaseClock, Timeline, timed_call
from suite.fleet.warm_up import WarmUp, by_work, first_contact_steps, wanted
from suite.fleet.workers import BOUND_CPUS, describe_cpus, visible_gpus
from suite.gate.state import gate_of
from suite.options import collect_only, options_of
from suite.state import SHARD_KEY, suite_session


class FleetPlugin:
    """xdist hooks (optional: harmless without xdist) and the per-process phase clock; one per run.
    ``note_collected(config, ids)`` is told the run's test ids once a worker has collected them, and an xdist
    controller calls ``check_early(config)`` once its workers were started (suite/hooks/startup_check.py)."""

    def __init__(self, config: pytest.Config, gpus: int,
                 note_collected: Callable[[pytest.Config, list[str]], None],
                 check_early: Callable[[pytest.Config], None] = lambda config: None) -> None:
        self.config = config
        self.gpus = gpus
        self.note_collected = note_collected
        self.check_early = check_early
        self.clock = PhaseClock()
        self.worker_phases: dict[str, dict[str, float]] = {}
        self.worker_environments: dict[str, dict[str, Any]] = {}
        self.worker_cpus: dict[str, dict[str, Any]] = {}  # each worker's share of the host's cores
        self.worker_affinity: dict[str, list[int] | None] = {}  # the cores each worker ran on (its own report)
        self.benchmarks: list[dict[str, Any]] = []
        self.is_worker = hasattr(config, "workerinput")
        self._place: Any = None  # nodeid -> (unit, model), made once the session exists
        self.timeline = Timeline()
        self.warm_up: WarmUp | None = None  # this process's (a worker's, or the one process's)
        self.worker_warm_ups: dict[str, dict[str, Any]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionstart(self, session: pytest.Session) -> Any:
        """After every plugin's configure (pytest-benchmark's session exists by now). A process that runs tests
        starts paying its one-off CUDA costs now, while it collects and waits (suite/fleet/warm_up.py). An xdist
        controller, once xdist's own session start has started the workers, makes the start-up check while they
        start (suite/hooks/startup_check.py check_early)."""
        self._start_session()
        result = yield
        if self.is_worker:
            self.timeline.mark("started")
        if not self.is_worker and options_of(self.config).numprocesses:
            self.timeline.mark("start-up check started")
            self.check_early(self.config)
            self.timeline.mark("start-up check done")
        return result

    def _start_session(self) -> None:
        gate = gate_of(self.config)
        if gate is not None:  # a regression's own message names a baseline spread otherwise (issue 47)
            gate.environment = {**gate.environment, **worker_layout(self.config)}
        if self.is_worker:
            self._enable_benchmarks_in_worker()
        else:
            atomic_benchmark_files(self.config)
        if self.is_worker or not options_of(self.config).numprocesses:
            suite = suite_session(self.config)
            engines = wanted(suite.device, [e for m in suite.config.models.values() for e in m.engines])
            if engines or self.is_worker:  # a worker's host lane starts once it has collected
                self.warm_up = WarmUp(engines, suite.device, get_backend)
                self.warm_up.start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.warm_up is not None:
            self.warm_up.wait()

    # ---- every process -------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        suite = suite_session(self.config)
        if self._place is None:
            self._place = work_unit_of(self.config)
        with timed_call(item, self.clock, lambda: suite.cache.stats.build_seconds, self._place(item.nodeid)[0]):
            return (yield)

    # ---- controller ----------------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        suite = suite_session(config)
        return _scheduler_class()(config, log, models=suite.config.models, durations=load_durations(suite.cache.root),
                                  place=work_unit_of(config), kin=model_kinship(config))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        self.timeline.mark(f"{_worker_id(node)} up")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.timeline.mark(f"{_worker_id(node)} collected")
        self.note_collected(self.config, list(ids))
        self.timeline.mark("start-up check done")  # kept from check_early where it ran (the first mark stands)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist, this process collected: the start-up check of every model a collected test uses
        (suite/preflight/), so that a model that cannot run is one error naming it, not a failure in each of its
        tests. (An xdist worker leaves it to the controller, which hears of the first worker's collection.)"""
        self.timeline.mark("collected")  # a worker's on its own clock: the controller hears of it only later
        if self.is_worker:
            self._prepare_first_contact([item.nodeid for item in session.items])
            return
        self.note_collected(self.config, [item.nodeid for item in session.items])
        self.timeline.mark("start-up check done")

    def _prepare_first_contact(self, nodeids: list[str]) -> None:
        """An xdist worker, collected, waits for the controller's start-up check: meanwhile its host lane makes the
        data and modules its tests use, the costliest models first (suite/fleet/warm_up.py). The check made them in the
        controller's process; a process without xdist made them in its own check and has nothing to do."""
        if self.warm_up is None or collect_only(self.config):
            return
        suite = suite_session(self.config)
        if self._place is None:
            self._place = work_unit_of(self.config)
        work = work_per_model(nodeids, self._place, load_durations(suite.cache.root))
        self.warm_up.prepare(first_contact_steps(suite, by_work(work)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.is_worker:
            self.timeline.mark("session finishing")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.timeline.mark(f"{_worker_id(node)} down")
        self._add_worker_output(node)

    def _add_worker_output(self, node: Any) -> None:
        """Add up what a worker produced (see ``worker_output``)."""
        data = getattr(node, "workeroutput", {}).get("suite")
        if not data:
            return
        from core.cache_stats import CacheStats

        suite = suite_session(self.config)
        suite.records.extend(data["records"])
        suite.remote_engines.update(data["engines"])
        suite.cache.stats = suite.cache.stats + CacheStats.from_dict(data["cache"])
        gate = gate_of(self.config)
        if gate is not None:
            gate.import_outcomes(data["gate"])
        worker = str(data["worker"])
        self.worker_phases[worker] = data["phases"]
        self.worker_cpus[worker] = {"cpus": describe_cpus(data.get("cpus")), "threads": data.get("threads")}
        self.worker_affinity[worker] = data.get("affinity")
        for unit, seconds in data["per_unit"].items():
            self.clock.per_unit[unit] = self.clock.per_unit.get(unit, 0.0) + seconds
        self.worker_environments[worker] = data["environment"]
        if _paid(data.get("warm_up", {})):
            self.worker_warm_ups[worker] = data["warm_up"]
        for name, when in data.get("marks", {}).items():  # the worker's own: "up" above is when the controller heard
            self.timeline.mark(f"{worker} {name} (own clock)", float(when))
        self.benchmarks.extend(data["benchmarks"])

    @pytest.hookimpl(optionalhook=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.is_worker:
            self.timeline.add(report)

    def warm_ups(self) -> dict[str, dict[str, Any]]:
        """Each process's warm-up (suite/fleet/warm_up.py): every worker's, or this process's."""
        if self.worker_warm_ups:
            return dict(sorted(self.worker_warm_ups.items()))
        if self.warm_up is not None:
            self.warm_up.finish()
        own = self.warm_up.summary() if self.warm_up is not None else {}
        return {"main": own} if _paid(own) else {}

    def phases(self) -> dict[str, float]:
        """Seconds per phase: this process's, or every worker's added up (worker-seconds)."""
        sources = list(self.worker_phases.values()) or [self.clock.seconds]
        total = {k: round(sum(w.get(k, 0.0) for w in sources), 1) for k in PHASES}
        return {k: v for k, v in total.items() if v}

    def worker_seconds(self) -> dict[str, float]:
        """Each xdist worker's busy seconds (tests and builds): how evenly the night was spread."""
        return {w: round(sum(p.values()), 1) for w, p in sorted(self.worker_phases.items())}

    # ---- worker --------------------------------------------------------------------------------------
    def _enable_benchmarks_in_worker(self) -> None:
        """pytest-benchmark switches itself off under xdist ('cannot be performed reliably in a parallelized
        environment'): true of workers sharing CPUs, not of one worker per GPU timing device work. Each
        worker times; the controller writes the one JSON (``write_benchmark_json``). Where workers do share
        the CPUs (``--device cpu -n 2``), each case measures the others' load and the busy guard refuses
        to judge it (suite/gate/): honest, if rarely useful."""
        bench = getattr(self.config, "_benchmarksession", None)
        if bench is None:
            return
        if not options_of(self.config).benchmark_disable:
            bench.disabled = False
            bench.xdist_warning = False
        bench.save = bench.autosave = bench.json = None
        bench.compare = False
        bench.compare_fail = []

    def worker_output(self) -> dict[str, Any]:
        suite = suite_session(self.config)
        if self.warm_up is not None:
            self.warm_up.finish()
        gate = gate_of(self.config)
        if gate is not None:
            gate.finish(suite.records)
        bench = getattr(self.config, "_benchmarksession", None)
        benchmarks: list[dict[str, Any]] = []
        if bench is not None and not bench.disabled:
            done = [b for b in bench.benchmarks if b]
            if done:
                benchmarks = self.config.hook.pytest_benchmark_generate_json(
                    config=self.config, benchmarks=done, include_data=bool(bench.save_data), machine_info={},
                    commit_info={})["benchmarks"]
        return {"worker": os.environ.get("PYTEST_XDIST_WORKER", "?"), "records": suite.records,
                "engines": suite.engine_facts(), "cache": suite.cache.stats.as_dict(),
                "gate": gate.export_outcomes() if gate is not None else {}, "phases": self.clock.seconds,
                "per_unit": self.clock.per_unit, "cpus": BOUND_CPUS, "affinity": _affinity(),
                "threads": suite.thread_share,
                "environment": {**fingerprint(suite.device), "cuda_visible_devices": BOUND_GPU},
                "warm_up": self.warm_up.summary() if self.warm_up is not None else {},
                "marks": dict(self.timeline.marks),
                "benchmarks": json.loads(json.dumps(benchmarks, default=str))}


def _paid(warm_up: dict[str, Any]) -> bool:
    """Whether a process's warm-up summary says it ran: an engine's warm-up, or its host lane."""
    return bool(warm_up.get("seconds")) or "host" in warm_up


def _affinity() -> list[int] | None:
    """The cores this process may run on (after suite/fleet/workers.py bound a worker to its share): every core of the
    host where it was not bound, which is what a one-worker run times on."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def _worker_order(worker: str) -> tuple[int, str]:
    return len(worker), worker  # gw2 before gw10


def worker_layout(config: pytest.Config) -> dict[str, Any]:
    """How the run was spread, as the environment records it (suite/environment.py LAYOUT_KEYS), each on one line
    as every table prints it: ``worker_count``, the xdist workers that reported (1 without xdist); ``worker_gpus``,
    the CUDA_VISIBLE_DEVICES entry each worker was given (suite/device.py BOUND_GPU), or this process's GPU, comma-
    separated ("none" on the CPU); ``worker_cores``, each worker's cores as it reported them ("gw0 16 cores (0-15);
    gw1 16 cores (16-31)"). An xdist run whose workers sent nothing (yet: during the tests, or stopped early)
    records what it asked for: its worker count and the GPUs it handed out, no cores; so does an xdist worker, for
    the latency gate's comparisons made in it."""
    plugin = config.pluginmanager.get_plugin("suite-fleet")
    reported = dict(plugin.worker_environments) if plugin is not None else {}
    if reported:
        names = sorted(reported, key=_worker_order)
        gpus = [str(g) for w in names if (g := reported[w].get("cuda_visible_devices")) is not None]
        return {"worker_count": len(names), "worker_gpus": ",".join(gpus) or "none",
                "worker_cores": "; ".join(f"{w} {describe_cpus(plugin.worker_affinity.get(w))}"  # type: ignore[union-attr]
                                          for w in names)}
    numprocesses = options_of(config).numprocesses
    if hasattr(config, "workerinput"):
        numprocesses = config.workerinput.get("workercount") or numprocesses
    if numprocesses:
        return {"worker_count": int(numprocesses), "worker_gpus": os.environ.get(WORKER_GPUS_ENV) or "none"}
    return {"worker_count": 1, "worker_gpus": _own_gpu(options_of(config).device),
            "worker_cores": f"main {describe_cpus(_affinity())}"}


def _own_gpu(device: str) -> str:
    """A process without xdist: the CUDA_VISIBLE_DEVICES entry of its --device ("none" on the CPU)."""
    if not device.startswith("cuda"):
        return "none"
    index = int(device.partition(":")[2] or 0)
    return (visible_gpus(index + 1)[index:index + 1] or ["none"])[0]


def _worker_id(node: Any) -> str:
    return str(getattr(getattr(node, "gateway", None), "id", "?"))


def run_environment(config: pytest.Config) -> dict[str, Any]:
    """The fingerprint of the process that timed: this one, or (xdist) the first worker's, with every
    worker's GPU listed; and how the run was spread (``worker_layout``)."""
    workers = config.pluginmanager.get_plugin("suite-fleet").worker_environments  # type: ignore[union-attr]
    if not workers:
        return {**fingerprint(suite_session(config).device), **worker_layout(config), **shard_environment(config)}
    first = workers[sorted(workers, key=_worker_order)[0]]
    return {**first, "workers": {w: f"{e.get('gpu_name', e.get('cpu'))} (CUDA_VISIBLE_DEVICES="
                                    f"{e.get('cuda_visible_devices')})" for w, e in sorted(workers.items())},
            **worker_layout(config), **shard_environment(config)}


def shard_environment(config: pytest.Config) -> dict[str, Any]:
    """A shard of a plan (suite/fleet/shard.py) says so in its environment: ``plan`` (its hash) and ``shard`` (K/N); the
    difference that opens a report does not compare them (metrics/environment_diff.py IGNORED: the host is
    ``hostname``); nothing for a run of no plan."""
    block = config.stash.get(SHARD_KEY, None)
    return {} if block is None else {"plan": block["plan_hash"], "shard": f"{block['shard']}/{block['of']}"}
