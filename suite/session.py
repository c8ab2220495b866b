"""The test session's state: which cells exist, and each engine, dataset and reference output built once.

Why memoize failures too: a broken build must error every test of its cell with the same message,
not be retried (and re-timed) by each of them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.cache import ArtifactCache
from core.inputs import tile_to_batch
from engines import get_backend
from engines.artifacts import ModelBuild
from engines.base import UNAVAILABLE, UNSUPPORTED, CellUnavailable, EngineRequest, LoadedEngine
from engines.feeds import check_output_dtypes, check_outputs
from suite.config import ModelConfig, SuiteConfig, resolve
from suite.timing import GpuMonitor, TimedCall

log = logging.getLogger(__name__)

REFERENCE_ENGINE = "torch"
REFERENCE_PRECISION = "fp32"


@dataclass(frozen=True, order=True)
class Cell:
    """One (model, engine, precision) combination: the unit that is built once and judged."""

    model: str
    engine: str
    precision: str

    @property
    def id(self) -> str:
        return f"{self.model}-{self.engine}-{self.precision}"

    @property
    def is_reference(self) -> bool:
        return self.engine == REFERENCE_ENGINE and self.precision == REFERENCE_PRECISION


def own_copy(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A feed of fresh, writable arrays: what one engine call may change without another seeing it."""
    return {name: np.array(value, copy=True) for name, value in feed.items()}


class SuiteSession:
    def __init__(self, config: SuiteConfig, cache: ArtifactCache, device: str = "cpu") -> None:
        self.config = config
        self.cache = cache
        self.device = device
        self._datasets: dict[str, Any] = {}
        self._builds: dict[str, ModelBuild] = {}
        self._engines: dict[Cell, LoadedEngine | BaseException] = {}
        self._reference_outputs: dict[tuple[str, str, int], dict[str, np.ndarray]] = {}
        self._reference_dtypes: dict[str, dict[str, np.dtype[Any]]] = {}  # model -> its reference's output dtypes
        self._released: dict[Cell, dict[str, Any]] = {}  # facts of engines released after their last test
        self.thread_share: int | None = None  # an xdist worker's share of the CPU cores (suite/fleet/)
        self.records: list[dict[str, Any]] = []
        self.remote_engines: dict[str, dict[str, Any]] = {}  # engine facts sent by xdist workers (suite/fleet/)
        self._stream: Path | None = None
        #: The one change ``run_batched`` makes to every cell's outputs, None for none (``alter_outputs``).
        self._alter_outputs: Callable[[Cell, dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None

    # ---- what exists -------------------------------------------------------------------------
    def cells(self, predicate: Callable[[ModelConfig], bool] = lambda m: True) -> list[Cell]:
        return [Cell(m.name, e, p) for m in self.config.models.values() if predicate(m)
                for e in m.engines for p in m.precisions]

    def model(self, name: str) -> ModelConfig:
        return self.config.models[name]

    # ---- fixtures: data and models -----------------------------------------------------------
    def dataset(self, ref: str) -> Any:
        if ref not in self._datasets:
            self._datasets[ref] = resolve(ref, f"dataset {ref}")(self.cache)
        return self._datasets[ref]

    def build(self, model_name: str) -> ModelBuild:
        if model_name not in self._builds:
            m = self.model(model_name)
            calibration = None
            if m.calibration_dataset:
                ref, samples = m.calibration_dataset, m.int8.samples
                calibration = lambda: self.dataset(ref).take(samples)
            self._builds[model_name] = ModelBuild(
                m.name, resolve(m.factory, f"[models.{m.name}].factory"), m.inputs, m.outputs, self.cache,
                calibration=calibration, int8_options=m.int8.as_dict(), export_overrides=dict(m.export),
            )
        return self._builds[model_name]

    # ---- engines -----------------------------------------------------------------------------
    def request(self, cell: Cell) -> EngineRequest:
        m = self.model(cell.model)
        options = dict(m.engine_options.get(cell.engine, {}))
        if cell.engine == "onnxruntime" and self.thread_share and "intra_op_threads" not in options:
            options["intra_op_threads"] = self.thread_share  # ORT's default is every core: the others' too
        return EngineRequest(model=m.name, engine=cell.engine, precision=cell.precision, device=self.device,
                             inputs=m.inputs, outputs=m.outputs, profile=m.profile, options=options)

    def engine(self, cell: Cell) -> LoadedEngine:
        """Build or load once; raises CellUnavailable (skip) or the build error (error) every time."""
        if cell not in self._engines:
            request = self.request(cell)
            backend = get_backend(cell.engine)
            try:
                reason = self.model(cell.model).declared_unsupported(cell.engine, cell.precision) or \
                    backend.unsupported_reason(request)
                if reason:
                    raise CellUnavailable(reason, UNSUPPORTED)
                reason = backend.skip_reason(request)
                if reason:
                    raise CellUnavailable(reason, UNAVAILABLE)
                loaded = backend.load(request, self.build(cell.model), self.cache)
                self._engines[cell] = self._with_census(request, loaded)
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                if isinstance(exc, CellUnavailable):
                    exc.cell = cell  # type: ignore[attr-defined]  # the verdict asks: the reference? a required engine?
                self._engines[cell] = exc
        result = self._engines[cell]
        if isinstance(result, BaseException):
            raise self._again(cell, result)
        return result

    def _again(self, cell: Cell, exc: BaseException) -> BaseException:
        """The memoized failure of a cell, for every test after the first: the first test shows it whole (the
        tool's own error chain); the others get its message alone. Re-raising the one exception object would
        append each test's frames to its traceback (a failed export printed 5,600 lines over 5 tests)."""
        seen = getattr(exc, "suite_reported", False)
        exc.suite_reported = True  # type: ignore[attr-defined]
        if not seen or isinstance(exc, CellUnavailable):
            exc.__traceback__ = None
            return exc
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return RuntimeError(f"{cell.id}: building the engine failed earlier in this run (see the first test of "
                            f"this cell for the whole error): {type(exc).__name__}: {text}")

    def _with_census(self, request: EngineRequest, loaded: LoadedEngine) -> LoadedEngine:
        """Engine facts gain the precision census of what the engine really runs (engines.localize.cell_census):
        on the CPU EP an 'fp16' ONNX Runtime cell computes every conv and gemm in fp32, and must say so."""
        from engines.localize import cell_census

        try:
            census = cell_census(request, self.build(request.model), loaded.runner, self.cache.root)
        except Exception as exc:  # the cell itself loaded: record why its census is missing, never hide it
            detail = {"precision_census_error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        else:
            if census is None:
                return loaded
            ok, text = census.verdict(request.precision)
            ops: dict[str, int] = {}
            for node in census.nodes:  # what the engine runs, fused ops by their own names (metrics/structure.py)
                ops[node.op_type] = ops.get(node.op_type, 0) + 1
            detail = {"precision_census": {"counts": dict(census), "by_kind": census.by_kind(), "ok": ok,
                                           "text": text, "ops": ops}}
        facts = dataclasses.replace(loaded.facts, detail={**loaded.facts.detail, **detail})
        return dataclasses.replace(loaded, facts=facts)

    def precision_check(self, cell: Cell) -> tuple[bool, str] | None:
        """(ok, text) of a loaded (or released) cell's precision census, None where there is none."""
        engine = self._engines.get(cell)
        facts = engine.facts.as_dict() if isinstance(engine, LoadedEngine) else self._released.get(cell, {})
        census = facts.get("precision_census")
        return None if census is None else (bool(census["ok"]), str(census["text"]))

    def reference_cell(self, model_name: str) -> Cell:
        return Cell(model_name, REFERENCE_ENGINE, REFERENCE_PRECISION)

    def loaded_cells(self) -> dict[Cell, LoadedEngine]:
        return {c: e for c, e in self._engines.items() if isinstance(e, LoadedEngine)}

    def engine_facts(self) -> dict[str, dict[str, Any]]:
        """Size, layers, parameters... of every engine this run loaded, here or in an xdist worker, released
        or not (with its peak GPU memory once released)."""
        facts = dict(self.remote_engines)
        facts.update({c.id: dict(f) for c, f in self._released.items()})
        facts.update({c.id: e.facts.as_dict() for c, e in self.loaded_cells().items()})
        return dict(sorted(facts.items()))

    # ---- lifetime (suite/lifetime.py decides when) -------------------------------------------
    def alive(self) -> list[str]:
        """The cells whose engines are loaded in this process now."""
        return sorted(c.id for c in self.loaded_cells())

    def release(self, cell: Cell, memory: dict[str, Any] | None = None) -> bool:
        """Drop a cell's engine after its last test in this process: its ONNX Runtime session and arena, CUDA
        graphs and their pools, torch module or AOTInductor package. Its facts stay (with ``memory``, the cell's
        peak GPU memory); a memoized failure stays too, without the frames its traceback held. Returns whether
        an engine was dropped. The caller frees the device memory (suite.gpu_memory.release_device_memory)."""
        held = self._engines.get(cell)
        if isinstance(held, LoadedEngine):
            facts = held.facts.as_dict()
            if memory is not None:
                facts["gpu_memory"] = memory
            self._released[cell] = facts
            del self._engines[cell]
            return True
        if isinstance(held, BaseException):
            held.__traceback__ = None
        elif memory is not None and cell in self._released:
            self._released[cell]["gpu_memory"] = memory
        return False

    # ---- running -----------------------------------------------------------------------------
    def run_batched(self, cell: Cell, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run a whole dataset through a cell in chunks no larger than its profile allows. Every chunk's
        outputs must have one row per input row, for the reference and every engine alike: a model that
        reduces or repeats the batch would otherwise pass parity against a reference doing the same. An
        engine's outputs must also have the reference's kind of value and at least its float width
        (engines.feeds.check_output_dtypes): compared as float64, a float16 output would pass unseen.

        Each call gets its own copy of its chunk: a model that changes its input in place (torch hands the
        runner's arrays to the module as they are) would otherwise change the feed every later engine sees, and
        the engine would be blamed for the reference's doing (issue 23)."""
        n = len(next(iter(feeds.values())))
        step = self.model(cell.model).profile.max_batch
        if cell.is_reference:
            step = self.model(cell.model).reference_batch or step
        chunks = []
        for i in range(0, n, step):
            chunk = own_copy({k: v[i:i + step] for k, v in feeds.items()})
            outputs = self._infer(cell, chunk)
            self._check_dtypes(cell, chunk, outputs)
            chunks.append(outputs)
        whole = {name: np.concatenate([c[name] for c in chunks]) for name in chunks[0]}
        return whole if self._alter_outputs is None else self._alter_outputs(cell, whole)

    def _infer(self, cell: Cell, chunk: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One call of the cell on ``chunk``, its outputs checked for one row per row the call was given. The
        reference runs at the model's ``reference_batch`` when one is set, the chunk filled with its own rows and
        the filler's outputs dropped: one shape for every feed, so that what a backend pays per new shape (cuDNN
        compiles depthwise convolution plans at run time, 1.5-3 s per batch on an H200, docs/gpu.md) is paid once
        per model and process rather than at every batch a test brings, on every worker the model's cells run."""
        rows = len(next(iter(chunk.values())))
        batch = self.model(cell.model).reference_batch if cell.is_reference else None
        given = chunk if batch is None or rows == batch else tile_to_batch(chunk, batch)
        outputs = self.engine(cell).runner.infer(given)
        check_outputs(outputs, len(next(iter(given.values()))), cell.id)
        return outputs if given is chunk else {name: np.asarray(value)[:rows] for name, value in outputs.items()}

    def alter_outputs(self, change: Callable[[Cell, dict[str, np.ndarray]], dict[str, np.ndarray]]) -> None:
        """The seam for the accuracy self-test knob (``--inject-accuracy-drop``, suite/gate/plugin.py): from now on
        ``run_batched`` returns ``change(cell, outputs)`` for every cell's whole outputs (every accuracy and parity
        output goes through it); ``change`` leaves alone what it must not alter (the reference's). Set once, before
        the first test: a second change is refused rather than stacked or swapped."""
        if self._alter_outputs is not None:
            raise RuntimeError("SuiteSession.alter_outputs: the session's outputs are already altered")
        self._alter_outputs = change

    def _check_dtypes(self, cell: Cell, chunk: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
        """The reference's output dtypes are learnt from its first call (run on this chunk when an engine comes
        first, as in tests/accuracy); every other cell's outputs are checked against them."""
        if cell.is_reference:
            self._reference_dtypes.setdefault(cell.model, {k: np.asarray(v).dtype for k, v in outputs.items()})
            return
        if cell.model not in self._reference_dtypes:
            reference = self.reference_cell(cell.model)
            head = {k: v[:self.model(cell.model).reference_batch or len(v)] for k, v in chunk.items()}
            self._check_dtypes(reference, head, self._infer(reference, head))
        check_output_dtypes(outputs, self._reference_dtypes[cell.model], cell.id)

    def reference_outputs(self, model_name: str, dataset_ref: str, n: int) -> dict[str, np.ndarray]:
        key = (model_name, dataset_ref, n)
        if key not in self._reference_outputs:
            data = self.dataset(dataset_ref).take(n)
            self._reference_outputs[key] = self.run_batched(self.reference_cell(model_name), data.feeds)
        return self._reference_outputs[key]

    def localize(self, cell: Cell, feed: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                 outputs: dict[str, np.ndarray], rows: int = 8) -> Any:
        """Where the cell leaves the fp32 reference (engines.localize), on the ``rows`` rows of ``feed`` where
        its outputs differ most from the reference's (a failure in row 40 must be in what is localized)."""
        from engines.localize import localize

        n = len(next(iter(feed.values())))
        worst = np.zeros(n)
        for name, ref in reference.items():
            diff = np.abs(np.asarray(outputs[name], np.float64) - np.asarray(ref, np.float64)).reshape(n, -1)
            worst = np.maximum(worst, np.where(np.isfinite(diff), diff, np.inf).max(axis=1))
        chosen = np.sort(np.argsort(-worst, kind="stable")[:rows])
        m = self.model(cell.model)
        build = self.build(cell.model)
        return localize(cell.engine, cell.precision, build, build.torch_module(),
                        {k: v[chosen] for k, v in feed.items()}, m.tolerance(cell.precision), device=self.device,
                        options=m.engine_options.get(cell.engine, {}), runner=self.engine(cell).runner,
                        cache=self.cache, max_rows=None)

    def timed_call(self, cell: Cell, engine: LoadedEngine, feed: dict[str, np.ndarray], path: str,
                   vary: Callable[[int], dict[str, np.ndarray]] | None = None) -> TimedCall:
        """The per-round callable for a latency case (``vary``: its other feeds, suite.timing.TimedCall); a path the
        engine cannot time is a skip."""
        if path != "all" and not self.device.startswith("cuda"):
            raise CellUnavailable(f"latency-{path} keeps tensors on a CUDA device; {self.device} has none", UNSUPPORTED)
        declared = self.model(cell.model).declared_unsupported(cell.engine, cell.precision, path)
        if declared:
            raise CellUnavailable(f"latency-{path}: {declared}", UNSUPPORTED)
        return TimedCall(engine.runner, path, feed, vary)

    def gpu_monitor(self, cell: Cell) -> GpuMonitor:
        return GpuMonitor(self.device)

    def stream_records_to(self, path: Path) -> None:
        """Append every record to ``path`` as one JSON line the moment it is made, so a run that is
        killed (a time limit, a crashed engine) still leaves what it measured."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        self._stream = path

    def record(self, kind: str, cell: Cell, **data: Any) -> dict[str, Any]:
        entry = {"kind": kind, "cell": cell.id, "model": cell.model, "engine": cell.engine,
                 "precision": cell.precision, "device": self.device, **data}
        if os.environ.get("PYTEST_XDIST_WORKER"):
            entry["worker"] = os.environ["PYTEST_XDIST_WORKER"]
        self.records.append(entry)
        if self._stream is not None:
            try:
                with open(self._stream, "a") as f:
                    f.write(json.dumps(entry, default=str) + "\n")
            except OSError as exc:  # a full disk: stop streaming; the final write (or its failure) says the rest
                log.warning("stopped streaming records to %s: %s", self._stream, exc)
                self._stream = None
        return entry
