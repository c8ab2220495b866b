"""One pytest-xdist worker per GPU, work handed out a cell at a time, and one result from many workers.

``pytest -n auto --device cuda`` starts one worker per visible GPU. Each worker is bound to its GPU
through CUDA_VISIBLE_DEVICES when this module is imported, before anything can initialise CUDA, and
then runs on ``cuda:0`` of its own view: no two workers ever time on the same GPU. Each worker also gets
its own contiguous share of the CPU cores (affinity and thread caps), so host-bound cases do not time the
other worker's threads. Tests are handed out a cell (model x engine x precision) at a time: every test of
a cell goes to the worker that loads its engine, the costliest cell first by the previous run's
durations (longest processing time first), so two GPUs share a night evenly. The engine cache's
per-entry lock (core/cache.py) keeps each build single across workers and hosts.

Each worker sends what it produced when it ends (xdist's ``workeroutput``): records, engine facts,
cache statistics, the gate's comparisons, pytest-benchmark's cases and time per phase. The controller
adds them up, so a run under xdist still writes one --suite-results file, one pytest-benchmark JSON
(a valid baseline), one HTML report and one ``engine cache:`` line. Test outcomes and the verdict's
components travel on the test reports themselves (suite/verdict.py).
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from suite.environment import fingerprint
from suite.gate_plugin import gate_of
from suite.state import suite_session

WORKER_GPUS_ENV = "SUITE_WORKER_GPUS"
DURATIONS_FILE = "durations.json"
PHASES = ("building", "accuracy/parity", "latency", "other")


def bind_worker_gpu() -> str | None:
    """In an xdist worker of a multi-GPU run: make the worker's one GPU its only visible device. Runs at
    import of the suite's plugin, before torch (or anything) initialises CUDA. Returns the GPU bound."""
    worker, gpus = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(WORKER_GPUS_ENV)
    if not worker or not gpus or not worker.startswith("gw"):
        return None
    visible = gpus.split(",")
    index = int(worker[2:])
    if index >= len(visible):
        raise RuntimeError(f"xdist worker {worker} has no GPU of its own ({len(visible)} visible: {gpus})")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[index]
    return visible[index]


BOUND_GPU = bind_worker_gpu()


def cpu_share(cpus: list[int], worker: str | None, count: int) -> list[int]:
    """Worker ``gwI``'s contiguous share of ``cpus`` when ``count`` workers split them (at least one each);
    all of them outside xdist."""
    if not worker or not worker.startswith("gw") or count <= 1:
        return cpus
    index, per = int(worker[2:]), max(1, len(cpus) // count)
    start = (index * per) % len(cpus)
    return cpus[start:start + per] or cpus[-per:]


def bind_worker_cpus() -> list[int] | None:
    """In an xdist worker: pin the process to its share of the CPU cores and cap the thread pools to it, before
    torch (or anything) starts one. Host-bound cases share the host; without this, each worker's torch and ONNX
    Runtime start a thread per core of the machine, and the workers time each other's threads. Returns the
    share, None outside xdist."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if not worker or count <= 1 or not hasattr(os, "sched_setaffinity"):
        return None
    share = cpu_share(sorted(os.sched_getaffinity(0)), worker, count)
    os.sched_setaffinity(0, share)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(len(share))
    return share


BOUND_CPUS = bind_worker_cpus()


def take_thread_share(session: Any) -> None:
    """A worker's torch threads and ONNX Runtime sessions use its share of the cores (suite.session.request)."""
    if BOUND_CPUS is None:
        return
    session.thread_share = len(BOUND_CPUS)
    import torch

    torch.set_num_threads(len(BOUND_CPUS))


def describe_cpus(cpus: list[int] | None) -> str:
    """'4 cores (0-3)' or '2 cores (0,5)'."""
    if not cpus:
        return "every core"
    ranges, start = [], cpus[0]
    for a, b in zip(cpus, [*cpus[1:], None], strict=True):
        if b != a + 1:
            ranges.append(f"{start}-{a}" if a != start else str(a))
            start = b if b is not None else start
    return f"{len(cpus)} core{'s' * (len(cpus) != 1)} ({','.join(ranges)})"


def visible_gpus(count: int) -> list[str]:
    """The GPUs a multi-GPU run spreads over, as CUDA_VISIBLE_DEVICES entries."""
    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def auto_workers(device: str, count_gpus: Any) -> int | None:
    """``-n auto``'s worker count: one per visible GPU with ``--device cuda``, one with ``--device cuda:N``,
    xdist's own choice (None) otherwise. ``count_gpus()`` is only called for ``--device cuda``; where it fails,
    xdist's choice stands and the device check at configure time says why."""
    if device == "cuda":
        try:
            return max(1, int(count_gpus()))
        except Exception:
            return None
    return 1 if device.startswith("cuda:") else None


def check_workers(device: str, numprocesses: Any, gpus: int) -> str | None:
    """Why this combination of --device and -n cannot keep one worker per GPU, or None."""
    if not numprocesses or numprocesses in ("auto", "logical") or not device.startswith("cuda"):
        return None
    n = int(numprocesses)
    if device != "cuda" and n > 1:
        return (f"-n {n} with --device {device}: every worker would time on the same GPU; use --device cuda "
                "(one worker per visible GPU) or -n 1")
    if n > gpus:
        return f"-n {n} with --device cuda: only {gpus} GPU(s) are visible, and two workers must never share one"
    return None


# =========================================================================== scheduling


class CostQueue(OrderedDict):  # type: ignore[type-arg]
    """LoadScope's work queue. A worker stays on its model (``prefer``) while that model has cells left: its
    module, data and reference outputs are warm there. When it must change, it takes the model with the most
    work left that no other worker is on (``elsewhere``), longest first, so that two workers rarely build the same
    model's reference twice; only when every model left is another worker's does it join one. Within the model,
    the costliest cell first. (Reordering the collection instead would break xdist: workers run tests by their
    index in their own collection.)"""

    def __init__(self, cost: Any, model_of: Any = None) -> None:
        super().__init__()
        self.cost = cost
        self.model_of = model_of or (lambda scope: None)
        self.prefer: str | None = None
        self.elsewhere: frozenset[str | None] = frozenset()  # the models other workers are on

    def popitem(self, last: bool = True) -> Any:
        if last or not self:
            return super().popitem(last)
        order = {s: i for i, s in enumerate(self)}
        left: dict[str | None, float] = {}  # each model's work left, in the order its first cell is queued
        for s in self:
            left[self.model_of(s)] = left.get(self.model_of(s), 0.0) + self.cost(s, self[s])
        model = self.prefer if self.prefer is not None and self.prefer in left else None
        if model is None:  # max keeps the first of equals: ties go to the model queued first
            model = max([m for m in left if m not in self.elsewhere] or list(left), key=left.__getitem__)
        scope = max((s for s in self if self.model_of(s) == model), key=lambda s: (self.cost(s, self[s]), -order[s]))
        return scope, self.pop(scope)


def _scheduler_class() -> Any:
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class CellScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """LoadScope with the cell (model x engine x precision) as the scope: finer than a model, so that two
        GPUs share a night evenly, and whole, so that a cell's engine is loaded once in the one worker that
        runs its tests (the engine cache's per-entry lock keeps each build single across workers). Which cell
        goes where: CostQueue (a worker keeps to its model; a new model is the one with the most work left that
        no other worker is on). Cost is the previous run's seconds for the cell, else its number of tests."""

        def __init__(self, config: pytest.Config, log: Any = None, models: Iterable[str] = (),
                     durations: dict[str, float] | None = None, place: Any = None) -> None:
            super().__init__(config, log)
            known = durations or {}
            self.place = place or (lambda nodeid: (None, None))
            self.scope_model: dict[str, str | None] = {}
            self.node_model: dict[Any, str | None] = {}
            self.workqueue = CostQueue(lambda scope, tests: known.get(scope.removeprefix("unit:"), len(tests)),
                                       self.scope_model.get)

        def _split_scope(self, nodeid: str) -> str:
            unit, model = self.place(nodeid)
            scope = f"unit:{unit}" if unit is not None else str(super()._split_scope(nodeid))
            self.scope_model[scope] = model
            return scope

        def _assign_work_unit(self, node: Any) -> None:
            self.workqueue.prefer = self.node_model.get(node)
            self.workqueue.elsewhere = frozenset(m for n, m in self.node_model.items() if n is not node)
            super()._assign_work_unit(node)
            scope = next(reversed(self.assigned_work[node]))  # the unit just assigned
            self.node_model[node] = self.scope_model.get(scope)

    return CellScheduling


def load_durations(cache_root: Path) -> dict[str, float]:
    try:
        data = json.loads((cache_root / DURATIONS_FILE).read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def save_durations(cache_root: Path, per_unit: dict[str, float]) -> None:
    """Seconds per unit of work (a cell) of this run, for the next run's scheduling (kept with the engine cache)."""
    if not per_unit:
        return
    from suite.results import write_json_atomic

    known = load_durations(cache_root)
    known.update({k: round(v, 2) for k, v in per_unit.items()})
    write_json_atomic(cache_root / DURATIONS_FILE, known)


# =========================================================================== phases


class PhaseClock:
    """Wall time per phase in one process: a test's call time, minus the engine builds inside it, goes to
    its kind (accuracy/parity, latency); the builds go to 'building'. Each unit's seconds, builds left out,
    are the next run's scheduling cost: after a cold night, a build-heavy cell is not scheduled as a long one."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.per_unit: dict[str, float] = {}

    def add(self, kind: str, seconds: float, building: float, unit: str | None) -> None:
        self.seconds["building"] += building
        self.seconds[kind] += max(0.0, seconds - building)
        if unit:
            # the next run's cost of the unit: a warm run's, so the one-off builds are left out
            self.per_unit[unit] = self.per_unit.get(unit, 0.0) + max(0.0, seconds - building)

    @staticmethod
    def kind_of(item: pytest.Item) -> str:
        if item.get_closest_marker("latency"):
            return "latency"
        if item.get_closest_marker("accuracy") or item.get_closest_marker("parity"):
            return "accuracy/parity"
        return "other"


class Timeline:
    """When each test's setup, call and teardown ran, and in which worker (the controller's view, from the
    reports' start and stop): where a worker's wall time went, setup and teardown (engine loads, releases) and
    idle gaps included, which the phase clock (calls only) does not see."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, float, float]] = []  # nodeid, worker, when, start, stop (epoch s)

    def add(self, report: pytest.TestReport) -> None:
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if start is None or stop is None:
            return
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        self.rows.append((report.nodeid, str(getattr(gateway, "id", "main")), report.when, float(start), float(stop)))

    def per_worker(self) -> dict[str, dict[str, float]]:
        """Each worker's span (first start to last stop), its seconds in setup, call and teardown, and the rest
        of the span (idle: waiting for work, or between a test's phases)."""
        out: dict[str, dict[str, float]] = {}
        for worker in sorted({r[1] for r in self.rows}):
            rows = [r for r in self.rows if r[1] == worker]
            span = max(r[4] for r in rows) - min(r[3] for r in rows)
            spent = {when: sum(r[4] - r[3] for r in rows if r[2] == when) for when in ("setup", "call", "teardown")}
            out[worker] = {"span_s": round(span, 1), **{f"{k}_s": round(v, 1) for k, v in spent.items()},
                           "idle_s": round(span - sum(spent.values()), 1)}
        return out

    def tests(self) -> list[list[Any]]:
        """One row per test phase: [nodeid, worker, when, start (s after the first), seconds]."""
        first = min((r[3] for r in self.rows), default=0.0)
        return [[n, w, when, round(a - first, 3), round(b - a, 4)] for n, w, when, a, b in self.rows]

    def summary(self) -> str | None:
        workers = self.per_worker()
        if not workers:
            return None
        return "worker time (span: setup, calls, teardown, idle): " + "; ".join(
            f"{w} {t['span_s']:.1f} s: {t['setup_s']:.1f}, {t['call_s']:.1f}, {t['teardown_s']:.1f}, "
            f"{t['idle_s']:.1f}" for w, t in workers.items())


def work_unit_of(config: pytest.Config) -> Any:
    """``nodeid -> (unit, model)`` for this run's models (suite.lifetime.unit_of_nodeid): the unit is a cell, or
    a model's tests of no cell; (None, None) for a test of no model."""
    from suite.lifetime import model_of_nodeid, unit_of_nodeid

    models = list(suite_session(config).config.models)
    configured = suite_session(config).config.models.values()
    overhead = config.getoption("--overhead-model") or next(iter(models), None)
    engines = {e for m in configured for e in m.engines}
    precisions = {p for m in configured for p in m.precisions}
    return lambda nodeid: (unit_of_nodeid(nodeid, models, engines, precisions, overhead),
                           model_of_nodeid(nodeid, models, overhead))


def timed_call(item: pytest.Item, clock: PhaseClock, build_seconds: Any, unit: str | None) -> Any:
    """Context for pytest_runtest_call: how long the test took, and how much of it was building."""

    class _Timer:
        def __enter__(self) -> None:
            self.start, self.built = time.perf_counter(), build_seconds()

        def __exit__(self, *exc: object) -> None:
            clock.add(PhaseClock.kind_of(item), time.perf_counter() - self.start, build_seconds() - self.built,
                      unit)

    return _Timer()


# =========================================================================== the plugin


class FleetPlugin:
    """xdist hooks (optional: harmless without xdist) and the per-process phase clock; one per run.
    ``note_collected(config, ids)`` is told the run's test ids once a worker has collected them (suite/plugin.py)."""

    def __init__(self, config: pytest.Config, gpus: int,
                 note_collected: Callable[[pytest.Config, list[str]], None]) -> None:
        self.config = config
        self.gpus = gpus
        self.note_collected = note_collected
        self.clock = PhaseClock()
        self.worker_phases: dict[str, dict[str, float]] = {}
        self.worker_environments: dict[str, dict[str, Any]] = {}
        self.worker_cpus: dict[str, dict[str, Any]] = {}  # each worker's share of the host's cores
        self.benchmarks: list[dict[str, Any]] = []
        self.is_worker = hasattr(config, "workerinput")
        self._place: Any = None  # nodeid -> (unit, model), made once the session exists
        self.timeline = Timeline()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """After every plugin's configure (pytest-benchmark's session exists by now)."""
        if self.is_worker:
            self._enable_benchmarks_in_worker()
        else:
            atomic_benchmark_files(self.config)

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
                                  place=work_unit_of(config))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.note_collected(self.config, list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Add up what a worker produced (see ``worker_output``)."""
        data = getattr(node, "workeroutput", {}).get("suite")
        if not data:
            return
        from core.cache import CacheStats

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
        for unit, seconds in data["per_unit"].items():
            self.clock.per_unit[unit] = self.clock.per_unit.get(unit, 0.0) + seconds
        self.worker_environments[worker] = data["environment"]
        self.benchmarks.extend(data["benchmarks"])

    @pytest.hookimpl(optionalhook=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.is_worker:
            self.timeline.add(report)

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
        to judge it (suite/gate_plugin.py): honest, if rarely useful."""
        bench = getattr(self.config, "_benchmarksession", None)
        if bench is None:
            return
        if not self.config.getoption("benchmark_disable"):
            bench.disabled = False
            bench.xdist_warning = False
        bench.save = bench.autosave = bench.json = None
        bench.compare = False
        bench.compare_fail = []

    def worker_output(self) -> dict[str, Any]:
        suite = suite_session(self.config)
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
                "per_unit": self.clock.per_unit, "cpus": BOUND_CPUS, "threads": suite.thread_share,
                "environment": {**fingerprint(suite.device), "cuda_visible_devices": BOUND_GPU},
                "benchmarks": json.loads(json.dumps(benchmarks, default=str))}


def run_environment(config: pytest.Config) -> dict[str, Any]:
    """The fingerprint of the process that timed: this one, or (xdist) the first worker's, with every
    worker's GPU listed."""
    workers = config.pluginmanager.get_plugin("suite-fleet").worker_environments  # type: ignore[union-attr]
    if not workers:
        return fingerprint(suite_session(config).device)
    first = workers[sorted(workers)[0]]
    return {**first, "workers": {w: f"{e.get('gpu_name', e.get('cpu'))} (CUDA_VISIBLE_DEVICES="
                                    f"{e.get('cuda_visible_devices')})" for w, e in sorted(workers.items())}}


def atomic_benchmark_files(config: pytest.Config) -> None:
    """pytest-benchmark writes its JSON (``--benchmark-json``) and storage entries (``--benchmark-save``,
    ``--benchmark-autosave``) with a plain open(): a run killed while writing leaves a truncated file, which
    then poisons ``latest`` and ``last:K``. Its two writers go through write_json_atomic instead (the file is
    the old one or the whole new one); xdist runs write theirs with write_benchmark_json below."""
    from suite.results import write_json_atomic

    bench = getattr(config, "_benchmarksession", None)
    if bench is None:
        return
    storage = bench.storage

    failed: list[tuple[str, str, OSError]] = []
    config.stash[_UNWRITTEN_KEY] = failed

    def save_json(output_json: dict[str, Any]) -> None:
        try:
            write_json_atomic(Path(bench.json), output_json)
        except OSError as exc:  # a full disk: one line and a failed check (suite/plugin.py), not a traceback
            failed.append(("--benchmark-json", str(bench.json), exc))
            return
        bench.logger.info(f"Wrote benchmark data in: {bench.json}", purple=True)

    def save(output_json: dict[str, Any], name: str) -> None:
        path = storage.get(f"{storage._next_num}_{name}.json")
        try:
            write_json_atomic(path, output_json)
        except OSError as exc:
            failed.append(("pytest-benchmark's storage entry", str(path), exc))
            return
        bench.logger.info(f"Saved benchmark data in: {path}")

    bench.save_json = save_json
    if hasattr(storage, "get") and hasattr(storage, "_next_num"):  # file storage (not elasticsearch)
        storage.save = save


_UNWRITTEN_KEY = pytest.StashKey[list[tuple[str, str, OSError]]]()


def unwritten_benchmark_files(config: pytest.Config) -> list[tuple[str, str, OSError]]:
    """(what, where, error) of each pytest-benchmark file this run could not write (atomic_benchmark_files)."""
    return list(config.stash.get(_UNWRITTEN_KEY, []))


def write_benchmark_json(config: pytest.Config, benchmarks: list[dict[str, Any]], environment: dict[str, Any],
                         complete: bool, incomplete_reason: str | None,
                         self_test_knobs: dict[str, Any] | None = None,
                         identity: dict[str, Any] | None = None) -> list[Path]:
    """The controller's one pytest-benchmark file (storage entry and/or --benchmark-json), from every worker's
    cases, written atomically; as loadable by --latency-baseline and --benchmark-compare as a single run's.
    ``identity``: the suite's commit and config (suite/plugin.py run_identity), as a single run's file has them."""
    import pytest_benchmark

    from suite.results import write_json_atomic

    bench = getattr(config, "_benchmarksession", None)
    if bench is None or not benchmarks:
        return []
    machine_info = bench.get_machine_info()
    machine_info["suite_environment"] = environment
    doc = {"machine_info": machine_info,
           "commit_info": config.hook.pytest_benchmark_generate_commit_info(config=config),
           "benchmarks": sorted(benchmarks, key=lambda b: str(b.get("fullname"))),
           "datetime": datetime.now(UTC).isoformat(), "version": pytest_benchmark.__version__,
           "suite": {"complete": complete, "incomplete_reason": incomplete_reason, "merged_from_workers": True,
                     **(identity or {}),
                     **({"self_test_knobs": self_test_knobs} if self_test_knobs else {})}}
    written = []
    name = bench.save or bench.autosave
    if name:
        path = bench.storage.get(f"{bench.storage._next_num}_{name}.json")
        write_json_atomic(path, doc)
        written.append(path)
    if bench.json:
        write_json_atomic(Path(bench.json), doc)
        written.append(Path(bench.json))
    return written
