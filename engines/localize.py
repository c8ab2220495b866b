"""When parity breaks, say where: the one entry point that localizes a failing cell, whatever its engine.

    report = localize(cell.engine, cell.precision, suite.build(cell.model), None, feed,
                      model.tolerance(cell.precision), device=suite.device,
                      options=model.engine_options.get(cell.engine, {}), runner=suite.engine(cell).runner,
                      cache=suite.cache)
    message += "\\n" + report.table()
    suite.record("localization", cell, **report.as_dict())

Per engine (docs/localization.md has the details and measured examples):

* ``torch`` (fp16, bf16): forward hooks on every named module of the engine's module and of the fp32 module.
* ``onnxruntime``: every tensor of the optimized graph the cell's session runs, against every tensor of the
  fp32 export (engines/onnx/intermediates.py); plus the precision census of that optimized graph and, when
  the cell's output fails, the optimization-level bisect (engines/onnxrt/bisect.py).
* ``inductor``: AOTInductor packages expose no intermediate tensors: the final output only (needs ``runner``).
* ``tensorrt``: a debug engine with every layer output marked (engines/trt/debug.py; needs ``cache``), and the
  engine inspector's precision census of the cell's engine (needs ``runner``).

Per layer the precision's tolerance is applied (metrics.localize: isclose %, max abs, cosine; NaN/Inf fail),
and the first layer outside it is ``first_divergent``; where no layer is, ``born`` still says where the error
rises most over its inputs' (ONNX graphs, whose topology is known).
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.inputs import InputSpec
from engines.base import EngineRequest, ModelArtifacts, Runner, ShapeProfile
from metrics import ParityReport, Tolerance, compare_outputs
from metrics.localize import LayerComparison, LayerPair, LayerStat, compare_layers, format_layer_table

if TYPE_CHECKING:
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()
    import torch

    from core.cache import ArtifactCache
    from engines.onnx.precision_census import PrecisionCensus
    from engines.onnxrt.bisect import BisectReport

#: Rows of the feed that localization runs (every intermediate tensor of both sides is held in memory).
DEFAULT_MAX_ROWS = 8
NO_INTERMEDIATES = "inductor packages expose no intermediate tensors: final output only"
ENGINES = ("torch", "onnxruntime", "inductor", "tensorrt")
Judge = Callable[[list[Any]], LayerComparison]


@dataclass(frozen=True)
class LocalizationReport:
    """Where a cell's outputs leave the fp32 reference's, layer by layer.

    ``first_divergent``: the first layer (topological order) outside the tolerance, None if none is.
    ``worst``: up to ``top`` layers, most severe first. ``final``: the cell's final outputs (as the instrumented
    run computed them) against the torch fp32 reference, judged like the parity test. ``census`` /
    ``census_verdict``: which precision the engine's graph computes in (onnxruntime, tensorrt). ``bisect``:
    onnxruntime's optimization-level bisect, when the final output failed. ``born``: the layers whose relative
    error rises most over their inputs' (metrics.localize ``error_rise``), where a drift that fails no layer starts;
    empty where the topology is unknown (torch hooks, a final output only)."""

    engine: str
    precision: str
    first_divergent: LayerStat | None
    worst: tuple[LayerStat, ...]
    note: str
    mode: str = ""
    layers_compared: int = 0
    layers_failed: int = 0
    final: Mapping[str, ParityReport] = field(default_factory=dict)
    census: PrecisionCensus | None = None
    census_verdict: tuple[bool, str] | None = None
    bisect: BisectReport | None = None
    unmatched: tuple[str, ...] = ()
    rows: int = 0
    born: tuple[LayerStat, ...] = ()

    @property
    def final_passed(self) -> bool | None:
        return None if not self.final else all(r.passed for r in self.final.values())

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe (NaN/Inf -> None), for --suite-results records and the HTML report."""
        data: dict[str, Any] = _json_safe({
            "engine": self.engine, "precision": self.precision, "mode": self.mode, "note": self.note,
            "rows": self.rows, "layers_compared": self.layers_compared, "layers_failed": self.layers_failed,
            "first_divergent": None if self.first_divergent is None else self.first_divergent.as_dict(),
            "worst": [s.as_dict() for s in self.worst],
            "born": [s.as_dict() for s in self.born],
            "final": {n: {"passed": r.passed, "cosine": r.cosine, "max_abs_error": r.max_abs_error,
                          "isclose_pct": r.isclose_pct, "top1_agreement_pct": r.top1_agreement_pct,
                          "failures": list(r.failures)} for n, r in self.final.items()},
            "census": None if self.census is None else {"counts": dict(self.census), "by_kind": self.census.by_kind(),
                                                        "source": self.census.source},
            "census_verdict": None if self.census_verdict is None else {"ok": self.census_verdict[0],
                                                                         "text": self.census_verdict[1]},
            "bisect": None if self.bisect is None else self.bisect.as_dict(),
            "unmatched": list(self.unmatched),
        })
        return data

    def table(self, rows: int | None = None) -> str:
        """A short fixed-width text for a pytest failure message: the verdict lines and the worst layers."""
        head = f"localization: {self.engine} {self.precision}"
        if self.mode:
            head += f" ({self.mode})"
        lines = [head + f"; {self.layers_compared} layers compared, {self.layers_failed} outside tolerance"]
        first = self.first_divergent
        if first is not None:
            why = "; ".join(first.failures)
            lines.append(f"first divergent: #{first.index} {first.label} ({first.op_type}): {why}")
        elif self.layers_compared:
            lines.append("first divergent: none (every compared layer is within tolerance)")
        if self.born:
            rising = self.born[0]
            lines.append(f"error rises most at: #{rising.index} {rising.label} ({rising.op_type}): relative error "
                         f"{rising.rel_error:.3g}, {rising.rise:.3g}x its inputs'")
        for name, r in self.final.items():
            verdict = "ok" if r.passed else "FAIL " + "; ".join(r.failures)
            lines.append(f"final output {name!r} vs torch fp32: {verdict} (cosine {_fmt(r.cosine, '.6f')})")
        if self.census_verdict is not None:
            ok, text = self.census_verdict
            lines.append(f"precision: {'' if ok else 'WARNING: '}{text}")
        shown = self.worst[:rows] if rows is not None else self.worst
        if shown:
            lines.append(f"worst {len(shown)}:")
            lines.append(format_layer_table(shown, first))
        if self.bisect is not None:
            lines.append(self.bisect.text())
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)


def localize(cell_engine: str, precision: str, artifacts: ModelArtifacts, reference_module: torch.nn.Module | None,
             feed: Mapping[str, np.ndarray], tolerance: Tolerance, device: str = "cpu",
             options: Mapping[str, Any] | None = None, top: int = 10, *, runner: Runner | None = None,
             cache: ArtifactCache | None = None, max_rows: int | None = DEFAULT_MAX_ROWS, bisect: bool = True,
             workdir: Path | None = None, gate_isclose: bool | None = None) -> LocalizationReport:
    """Localize cell (``cell_engine``, ``precision``) of the model ``artifacts`` builds, on ``feed``.

    ``reference_module``: the fp32 torch module (default ``artifacts.torch_module()``); it is copied, never
    changed. ``tolerance``: the precision's (``ModelConfig.tolerance(precision)``). ``options``: the engine's
    ``engine_options`` (execution provider, threads...). ``runner``: the cell's loaded runner, needed for
    inductor (its outputs are all there is) and for TensorRT's census. ``cache``: the suite's ArtifactCache,
    needed for TensorRT's debug engine. ``max_rows``: the feed is cut to its first rows (None: all).
    ``bisect``: run onnxruntime's optimization-level bisect (on the whole feed: it compares final outputs only)
    when the final output fails. ``workdir`` keeps the optimized ONNX graphs (a temporary folder by default).
    ``gate_isclose``: whether isclose % fails a layer (metrics.localize; default: only for tolerances without
    min_cosine)."""
    if cell_engine not in ENGINES:
        raise ValueError(f"unknown engine {cell_engine!r}; valid: {', '.join(ENGINES)}")
    options = dict(options or {})
    full_feed = {k: np.asarray(v) for k, v in feed.items()}
    feed = {k: v[:max_rows] if max_rows else v for k, v in full_feed.items()}
    module = reference_module if reference_module is not None else artifacts.torch_module()
    input_names = _input_names(artifacts, feed)
    output_names = _output_names(artifacts, module, feed, input_names)
    reference = _torch_outputs(module, feed, input_names, output_names, device)

    def full_reference() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The whole feed and its reference outputs, for the bisect (final outputs only: no memory concern)."""
        if len(next(iter(full_feed.values()))) == len(next(iter(feed.values()))):
            return dict(feed), reference
        return full_feed, _torch_outputs(module, full_feed, input_names, output_names, device)

    rows = len(next(iter(feed.values())))

    def judge(pairs: list[Any]) -> LayerComparison:
        return compare_layers(pairs, tolerance, top, gate_isclose)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(workdir) if workdir is not None else Path(tmp)
        if cell_engine == "torch":
            return _torch(precision, module, feed, tolerance, device, options, judge, input_names, output_names,
                          reference, rows)
        if cell_engine == "onnxruntime":
            return _onnxruntime(precision, artifacts, feed, tolerance, device, options, judge, reference, rows,
                                full_reference if bisect else None, folder)
        if cell_engine == "inductor":
            return _final_only(cell_engine, precision, runner, feed, reference, tolerance, judge, rows,
                               NO_INTERMEDIATES)
        return _tensorrt(precision, artifacts, feed, tolerance, device, options, judge, reference, rows, runner,
                         cache)


# ---------------------------------------------------------------------------------------------------------
# Engines


def _torch(precision: str, module: torch.nn.Module, feed: Mapping[str, np.ndarray], tolerance: Tolerance,
           device: str, options: Mapping[str, Any], judge: Judge, input_names: list[str], output_names: list[str],
           reference: dict[str, np.ndarray], rows: int) -> LocalizationReport:
    from engines.pytorch.hooks import ROOT, torch_layer_pairs

    pairs, unmatched = torch_layer_pairs(module, feed, precision, input_names, output_names, device,
                                         bool(options.get("channels_last", False)))
    comparison = judge(pairs)
    final_pair = next((p for p in pairs if p[0] == ROOT), None)
    final = {}
    if final_pair is not None and len(output_names) == 1:
        final = compare_outputs({output_names[0]: reference[output_names[0]]}, {output_names[0]: final_pair[3]},
                                tolerance)
    note = (f"forward hooks on {len(pairs)} module calls; functional ops inside forward() are not observed; "
            f"{ROOT} is the whole model's output")
    return _report("torch", precision, comparison, note, "forward hooks, fp32 module vs the cell's module",
                   final, rows=rows, unmatched=unmatched)


def _onnxruntime(precision: str, artifacts: ModelArtifacts, feed: Mapping[str, np.ndarray], tolerance: Tolerance,
                 device: str, options: Mapping[str, Any], judge: Judge, reference: dict[str, np.ndarray], rows: int,
                 bisect_data: Callable[[], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] | None,
                 folder: Path) -> LocalizationReport:
    from engines.onnx.intermediates import collect_layer_pairs
    from engines.onnx.precision_census import precision_census
    from engines.onnxrt.bisect import bisect_optimizations

    engine_path, providers, make_options = onnxruntime_cell(artifacts, precision, device, options, feed)
    found = collect_layer_pairs(Path(artifacts.onnx_path("fp32")), engine_path, feed, make_options, providers,
                                workdir=folder)
    comparison = judge(found.pairs)
    final = compare_outputs(reference, {n: found.engine_outputs[n] for n in reference}, tolerance)
    census = census_verdict = None
    notes = list(found.notes)
    if found.optimized_model is not None:
        census = precision_census(found.optimized_model)
        census.source = f"{engine_path} optimized by onnxruntime ({', '.join(_names(providers))})"
        census_verdict = census.verdict(precision)
    notes.append(_matched_note(len(found.pairs), found.unmatched))
    onnx_vs_torch = compare_outputs(reference, {n: found.reference_outputs[n] for n in reference}, tolerance)
    if not all(r.passed for r in onnx_vs_torch.values()):
        notes.append("the fp32 ONNX export itself differs from the torch reference beyond this tolerance "
                     f"({'; '.join(f for r in onnx_vs_torch.values() for f in r.failures)}): the divergence is in the "
                     "export, before any engine")
    report_bisect = None
    if bisect_data is not None and not all(r.passed for r in final.values()):
        bisect_feed, bisect_reference = bisect_data()
        report_bisect = bisect_optimizations(engine_path, bisect_feed, bisect_reference, tolerance, providers,
                                             session_options=make_options, workdir=folder / "bisect")
    return _report("onnxruntime", precision, comparison, "; ".join(notes), found.mode, final, census,
                   census_verdict, report_bisect, rows, found.unmatched)


def onnxruntime_cell(artifacts: ModelArtifacts, precision: str, device: str, options: Mapping[str, Any],
                     feed: Mapping[str, np.ndarray]) -> tuple[Path, list[Any], Callable[[], ort.SessionOptions]]:
    """What an onnxruntime cell runs, as its backend sets it up: the ONNX file, the providers, and a factory of
    its SessionOptions (intra-op threads, quiet log, the default optimization level ORT_ENABLE_ALL)."""
    from engines.onnxrt.backend import OnnxRuntimeBackend, onnx_file

    request = _request(artifacts, "onnxruntime", precision, device, options, feed)
    providers = OnnxRuntimeBackend().providers(request)
    return Path(onnx_file(request, artifacts)), providers, lambda: _session_options(options)


def _session_options(options: Mapping[str, Any]) -> ort.SessionOptions:
    """The cell's SessionOptions as its backend makes them (intra-op threads, quiet log, ORT_ENABLE_ALL)."""
    from engines.ort_import import import_onnxruntime

    so = import_onnxruntime().SessionOptions()
    threads = options.get("intra_op_threads")
    if threads:
        so.intra_op_num_threads = int(threads)
    so.log_severity_level = 3
    return so


def cell_census(request: EngineRequest, artifacts: ModelArtifacts, runner: Runner | None = None,
                workdir: Path | None = None) -> PrecisionCensus | None:
    """Which precision a loaded cell's engine computes in, by what it really runs: ONNX Runtime's optimized
    graph (saved as its session optimizes it), TensorRT's engine inspector. None for torch and inductor:
    they compute in the module's dtype, which is the precision by construction."""
    if request.engine == "onnxruntime":
        import tempfile

        from engines.onnx.precision_census import optimized_census
        from engines.onnxrt.backend import OnnxRuntimeBackend, onnx_file

        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            return optimized_census(Path(onnx_file(request, artifacts)),
                                    lambda: _session_options(request.options),
                                    OnnxRuntimeBackend().providers(request), Path(tmp) / "optimized.onnx")
    if request.engine == "tensorrt":
        from engines.trt.debug import engine_precision_census
        from engines.trt.runner import TensorRTRunner

        if isinstance(runner, TensorRTRunner):
            return engine_precision_census(runner.engine, runner.context, f"TensorRT engine of {request.cell_id}")
    return None


def _final_only(engine: str, precision: str, runner: Runner | None, feed: Mapping[str, np.ndarray],
                reference: dict[str, np.ndarray], tolerance: Tolerance, judge: Judge, rows: int,
                note: str) -> LocalizationReport:
    if runner is None:
        return LocalizationReport(engine, precision, None, (), note + " (no runner given: nothing compared)",
                                  mode="final output only", rows=rows)
    outputs = runner.infer(feed)
    final = compare_outputs(reference, {n: outputs[n] for n in reference}, tolerance)
    pairs = [LayerPair(n, "output", reference[n], outputs[n]) for n in reference]
    return _report(engine, precision, judge(pairs), note, "final output only", final, rows=rows)


def _tensorrt(precision: str, artifacts: ModelArtifacts, feed: Mapping[str, np.ndarray], tolerance: Tolerance,
              device: str, options: Mapping[str, Any], judge: Judge, reference: dict[str, np.ndarray], rows: int,
              runner: Runner | None, cache: ArtifactCache | None) -> LocalizationReport:
    import onnx

    from engines.onnx.intermediates import reference_arrays
    from engines.onnx.matching import pair_layers
    from engines.trt.debug import debug_runner, engine_precision_census, layer_arrays
    from engines.trt.runner import TensorRTRunner

    if cache is None:
        raise ValueError("tensorrt localization builds a debug engine: pass cache=the suite's ArtifactCache")
    request = _request(artifacts, "tensorrt", precision, device, options, feed)
    debug, marked, onnx_path = debug_runner(request, artifacts, cache)
    try:
        arrays = layer_arrays(debug, marked, feed)
    finally:
        debug.close()
    ref_model, ref_arrays = reference_arrays(Path(artifacts.onnx_path("fp32")), feed)
    pairs, unmatched = pair_layers(ref_model, ref_arrays, onnx.load(str(onnx_path)), None, arrays)
    comparison = judge(pairs)
    final = compare_outputs(reference, {n: arrays[n] for n in reference}, tolerance)
    notes = [_matched_note(len(pairs), unmatched),
             f"debug engine with {len(marked)} layer outputs marked: marking keeps TensorRT from fusing across "
             "them, so layers may be computed less fused than in the cell's engine"]
    census = census_verdict = None
    if isinstance(runner, TensorRTRunner):
        cell_outputs = runner.infer(feed)
        same = compare_outputs({n: cell_outputs[n] for n in reference}, {n: arrays[n] for n in reference}, tolerance)
        if not all(r.passed for r in same.values()):
            notes.append("the debug engine's outputs differ from the cell engine's beyond the tolerance: the fault "
                         "may be in a fusion that marking prevented")
        census = engine_precision_census(runner.engine, runner.context, f"TensorRT engine of {request.cell_id}")
        census_verdict = census.verdict(precision)
    return _report("tensorrt", precision, comparison, "; ".join(notes), "TensorRT debug engine, layer outputs marked",
                   final, census, census_verdict, None, rows, unmatched)


# ---------------------------------------------------------------------------------------------------------
# helpers


def _report(engine: str, precision: str, comparison: LayerComparison, note: str, mode: str,
            final: Mapping[str, ParityReport], census: PrecisionCensus | None = None,
            census_verdict: tuple[bool, str] | None = None, bisect: BisectReport | None = None, rows: int = 0,
            unmatched: list[str] | tuple[str, ...] = ()) -> LocalizationReport:
    failed = sum(1 for s in comparison.layers if not s.passed)
    if comparison.first_divergent is None and final and not all(r.passed for r in final.values()):
        note = ("no compared layer leaves the tolerance but the final output does: the divergence accumulates "
                "below the per-layer tolerance, or is in what was not observed; " + note)
    return LocalizationReport(engine, precision, comparison.first_divergent, comparison.worst, note, mode,
                              len(comparison.layers), failed, dict(final), census, census_verdict, bisect,
                              tuple(unmatched), rows, comparison.born)


def _request(artifacts: ModelArtifacts, engine: str, precision: str, device: str, options: Mapping[str, Any],
             feed: Mapping[str, np.ndarray]) -> EngineRequest:
    inputs = getattr(artifacts, "inputs", None) or tuple(
        InputSpec(name, tuple(int(d) for d in np.shape(v)[1:]), str(np.asarray(v).dtype)) for name, v in feed.items())
    outputs = tuple(getattr(artifacts, "outputs", ()) or ())
    rows = len(next(iter(feed.values())))
    profile = getattr(artifacts, "profile", None) or ShapeProfile(1, rows, max(rows, 1))
    return EngineRequest(model=artifacts.name, engine=engine, precision=precision, device=device,
                         inputs=tuple(inputs), outputs=outputs, profile=profile, options=dict(options))


def _input_names(artifacts: ModelArtifacts, feed: Mapping[str, np.ndarray]) -> list[str]:
    inputs = getattr(artifacts, "inputs", None)
    return [i.name for i in inputs] if inputs else list(feed)


def _output_names(artifacts: ModelArtifacts, module: torch.nn.Module, feed: Mapping[str, np.ndarray],
                  input_names: list[str]) -> list[str]:
    outputs = getattr(artifacts, "outputs", None)
    if outputs:
        return list(outputs)
    import torch

    with torch.inference_mode():
        out = module(*[torch.from_numpy(np.ascontiguousarray(feed[n])) for n in input_names])
    count = 1 if isinstance(out, torch.Tensor) else len(out)
    return [f"output{i}" for i in range(count)]


def _torch_outputs(module: torch.nn.Module, feed: Mapping[str, np.ndarray], input_names: list[str],
                   output_names: list[str], device: str) -> dict[str, np.ndarray]:
    """The suite's reference: torch fp32 (TF32 off) on ``device``; the module is copied, never moved."""
    from engines.pytorch.backend import TorchRunner

    runner = TorchRunner(copy.deepcopy(module), tuple(input_names), tuple(output_names), device, "fp32")
    return runner.infer(feed)


def _matched_note(matched: int, unmatched: list[str] | tuple[str, ...]) -> str:
    text = f"{matched} of {matched + len(unmatched)} fp32 tensors matched in the engine's graph"
    if not unmatched:
        return text
    blocked = sum(1 for n in unmatched if n.endswith(" (NCHWc)"))
    others = [n for n in unmatched if not n.endswith(" (NCHWc)")]
    parts = []
    if blocked:
        parts.append(f"{blocked} exist only in ONNX Runtime's blocked NCHWc layout")
    if others:
        parts.append(f"{len(others)} fused away or not materialized: {_few(others)}")
    return text + " (" + "; ".join(parts) + ")"


def _names(providers: list[Any]) -> list[str]:
    return [p if isinstance(p, str) else p[0] for p in providers]


def _few(names: list[str] | tuple[str, ...], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def _fmt(x: float, spec: str) -> str:
    return "n/a" if math.isnan(x) else f"{x:{spec}}"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value
