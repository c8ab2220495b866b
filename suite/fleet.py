"""One pytest-xdist worker per GPU, a model's tests on one worker, and one result from many workers.

``pytest -n auto --device cuda`` starts one worker per visible GPU. Each worker is bound to its GPU
through CUDA_VISIBLE_DEVICES when this module is imported, before anything can initialise CUDA, and
then runs on ``cuda:0`` of its own view: no two workers ever time on the same GPU. Tests are handed
out a model at a time (every test of a model goes to the worker that builds its engines), largest
first by the previous run's durations, so a model's engines are built once and the longest model
starts first. The engine cache's per-entry lock (suite/cache.py) keeps builds single across hosts too.

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
from collections.abc import Iterable
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

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


def _scheduler_class() -> Any:
    from collections import OrderedDict

    from xdist.scheduler.loadscope import LoadScopeScheduling

    class CostQueue(OrderedDict):  # type: ignore[type-arg]
        """LoadScope's work queue, handing out the costliest scope first. (Reordering the collection
        instead would break xdist: workers run tests by their index in their own collection.)"""

        def __init__(self, cost: Any) -> None:
            super().__init__()
            self.cost = cost

        def popitem(self, last: bool = True) -> Any:
            if last or not self:
                return super().popitem(last)
            scope = max(self, key=lambda s: (self.cost(s, self[s]), -list(self).index(s)))
            return scope, self.pop(scope)

    class ModelScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """LoadScope with the model as the scope (one worker builds and runs all of a model), the
        costliest model first: the previous run's seconds for it, else its number of tests."""

        def __init__(self, config: pytest.Config, log: Any = None, models: Iterable[str] = (),
                     durations: dict[str, float] | None = None) -> None:
            super().__init__(config, log)
            self.models = sorted(models, key=len, reverse=True)
            known = durations or {}
            self.workqueue = CostQueue(lambda scope, tests: known.get(scope.removeprefix("model:"), len(tests)))

        def _split_scope(self, nodeid: str) -> str:
            param = nodeid.partition("[")[2]
            for name in self.models:
                if param == name + "]" or param.startswith(name + "-"):
                    return f"model:{name}"
            return str(super()._split_scope(nodeid))

    return ModelScheduling


def load_durations(cache_root: Path) -> dict[str, float]:
    try:
        data = json.loads((cache_root / DURATIONS_FILE).read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def save_durations(cache_root: Path, per_model: dict[str, float]) -> None:
    """Seconds per model of this run, for the next run's scheduling (kept with the engine cache)."""
    if not per_model:
        return
    from suite.results import write_json_atomic

    known = load_durations(cache_root)
    known.update({k: round(v, 2) for k, v in per_model.items()})
    write_json_atomic(cache_root / DURATIONS_FILE, known)


# =========================================================================== phases


class PhaseClock:
    """Wall time per phase in one process: a test's call time, minus the engine builds inside it, goes to
    its kind (accuracy/parity, latency); the builds go to 'building'."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.per_model: dict[str, float] = {}

    def add(self, kind: str, seconds: float, building: float, model: str | None) -> None:
        self.seconds["building"] += building
        self.seconds[kind] += max(0.0, seconds - building)
        if model:
            self.per_model[model] = self.per_model.get(model, 0.0) + seconds

    @staticmethod
    def kind_of(item: pytest.Item) -> str:
        if item.get_closest_marker("latency"):
            return "latency"
        if item.get_closest_marker("accuracy") or item.get_closest_marker("parity"):
            return "accuracy/parity"
        return "other"


def timed_call(item: pytest.Item, clock: PhaseClock, build_seconds: Any, model: str | None) -> Any:
    """Context for pytest_runtest_call: how long the test took, and how much of it was building."""

    class _Timer:
        def __enter__(self) -> None:
            self.start, self.built = time.perf_counter(), build_seconds()

        def __exit__(self, *exc: object) -> None:
            clock.add(PhaseClock.kind_of(item), time.perf_counter() - self.start, build_seconds() - self.built,
                      model)

    return _Timer()


# =========================================================================== the plugin


class FleetPlugin:
    """xdist hooks (optional: harmless without xdist) and the per-process phase clock; one per run."""

    def __init__(self, config: pytest.Config, gpus: int) -> None:
        self.config = config
        self.gpus = gpus
        self.clock = PhaseClock()
        self.worker_phases: dict[str, dict[str, float]] = {}
        self.worker_environments: dict[str, dict[str, Any]] = {}
        self.benchmarks: list[dict[str, Any]] = []
        self.is_worker = hasattr(config, "workerinput")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """After every plugin's configure (pytest-benchmark's session exists by now)."""
        if self.is_worker:
            self._enable_benchmarks_in_worker()
        else:
            atomic_benchmark_files(self.config)

    # ---- every process -------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        from suite.plugin import models_of, suite_session

        suite = suite_session(self.config)
        model = next(iter(models_of([item.nodeid], suite.config.models)), None)
        with timed_call(item, self.clock, lambda: suite.cache.stats.build_seconds, model):
            return (yield)

    # ---- controller ----------------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        from suite.plugin import suite_session

        suite = suite_session(config)
        return _scheduler_class()(config, log, models=suite.config.models, durations=load_durations(suite.cache.root))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        from suite.plugin import note_collected

        note_collected(self.config, list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Add up what a worker produced (see ``worker_output``)."""
        data = getattr(node, "workeroutput", {}).get("suite")
        if not data:
            return
        from suite.cache import CacheStats
        from suite.gate_plugin import gate_of
        from suite.plugin import suite_session

        suite = suite_session(self.config)
        suite.records.extend(data["records"])
        suite.remote_engines.update(data["engines"])
        suite.cache.stats = suite.cache.stats + CacheStats.from_dict(data["cache"])
        gate = gate_of(self.config)
        if gate is not None:
            gate.import_outcomes(data["gate"])
        worker = str(data["worker"])
        self.worker_phases[worker] = data["phases"]
        for model, seconds in data["per_model"].items():
            self.clock.per_model[model] = self.clock.per_model.get(model, 0.0) + seconds
        self.worker_environments[worker] = data["environment"]
        self.benchmarks.extend(data["benchmarks"])

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
        from suite.environment import fingerprint
        from suite.gate_plugin import gate_of
        from suite.plugin import suite_session

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
                "per_model": self.clock.per_model,
                "environment": {**fingerprint(suite.device), "cuda_visible_devices": BOUND_GPU},
                "benchmarks": json.loads(json.dumps(benchmarks, default=str))}


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

    def save_json(output_json: dict[str, Any]) -> None:
        write_json_atomic(Path(bench.json), output_json)
        bench.logger.info(f"Wrote benchmark data in: {bench.json}", purple=True)

    def save(output_json: dict[str, Any], name: str) -> None:
        path = storage.get(f"{storage._next_num}_{name}.json")
        write_json_atomic(path, output_json)
        bench.logger.info(f"Saved benchmark data in: {path}")

    bench.save_json = save_json
    if hasattr(storage, "get") and hasattr(storage, "_next_num"):  # file storage (not elasticsearch)
        storage.save = save


def write_benchmark_json(config: pytest.Config, benchmarks: list[dict[str, Any]], environment: dict[str, Any],
                         complete: bool, incomplete_reason: str | None) -> list[Path]:
    """The controller's one pytest-benchmark file (storage entry and/or --benchmark-json), from every worker's
    cases, written atomically; as loadable by --latency-baseline and --benchmark-compare as a single run's."""
    from datetime import datetime

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
           "suite": {"complete": complete, "incomplete_reason": incomplete_reason, "merged_from_workers": True}}
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
