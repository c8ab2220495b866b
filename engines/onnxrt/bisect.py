"""Bisect ONNX Runtime's graph optimization levels: at which level does a failing cell start to fail, and
which nodes did that level bring in?

The same file, feed and providers are run at ORT_DISABLE_ALL, ORT_ENABLE_BASIC, ORT_ENABLE_EXTENDED,
ORT_ENABLE_LAYOUT (where this onnxruntime has it) and ORT_ENABLE_ALL, each judged against the reference
outputs with the cell's tolerance (metrics.compare_outputs, as the parity test does). The report names the
lowest level that fails and the last passing level below it, and diffs the two levels' optimized graphs
(``SessionOptions.optimized_model_filepath``): op types and nodes that appear (a QLinearConv, a fused node;
a fused node often keeps the name of the node it replaced, so a node is new when its name *or its op type*
is) or disappear.

Each level is also judged against the unoptimized run (ORT_DISABLE_ALL), with the same tolerance less its
top-1 agreement (a property of near-tied logits, not of a kernel): that separates "an optimization changed
the numbers" from "the model was already wrong before any optimization", and where the unoptimized run
already fails, it still names the level that made things worse. Found that way: int8 EfficientNet-Lite0 on a
CPU without VNNI fails top-1 agreement at every level (its quantization), and ORT_ENABLE_EXTENDED's
QLinearConv/QGemm fusion also collapses it to cosine 0.51 (docs/localization.md).

Then, at the cell's own level, the execution provider's settings that change numerics are tried one at a time
(``PROVIDER_VARIANTS``: the CUDA EP's TF32, cuDNN algorithm search, NHWC layout and strict SkipLayerNorm
options; the session's QDQ fusion switch and, on the CPU, the u8s8 precision mode), each judged like a level and
against the cell's own run: a setting under which a failing cell passes, or a passing one fails, is the other
half of an upstream report.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from metrics import Tolerance, compare_outputs

if TYPE_CHECKING:
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_LAYOUT", "ORT_ENABLE_ALL")
_SHOWN_NAMES = 6


@dataclass(frozen=True)
class Variant:
    """One setting changed from the cell's, at the cell's optimization level: provider options merged into the
    first provider's, or session config entries (``SessionOptions.add_session_config_entry``)."""

    label: str
    provider_options: Mapping[str, str] = field(default_factory=dict)
    config_entries: Mapping[str, str] = field(default_factory=dict)


_NO_QDQ_FUSION = Variant("session.disable_quant_qdq=1", config_entries={"session.disable_quant_qdq": "1"})
#: Documented settings of each execution provider that change the numbers, tried one at a time. A QDQ file's
#: fusion into QLinear*/QGemm kernels is one switch; on x86 without VNNI the u8s8 kernels sum pairs of products
#: in 16 bits unless ``session.x64quantprecision`` is 1 (the EfficientNet-Lite0 int8 collapse).
PROVIDER_VARIANTS: Mapping[str, tuple[Variant, ...]] = {
    "CUDAExecutionProvider": (
        Variant("use_tf32=0", {"use_tf32": "0"}),
        Variant("use_tf32=1", {"use_tf32": "1"}),
        Variant("cudnn_conv_algo_search=HEURISTIC", {"cudnn_conv_algo_search": "HEURISTIC"}),
        Variant("cudnn_conv_algo_search=DEFAULT", {"cudnn_conv_algo_search": "DEFAULT"}),
        Variant("prefer_nhwc=1", {"prefer_nhwc": "1"}),
        Variant("enable_skip_layer_norm_strict_mode=1", {"enable_skip_layer_norm_strict_mode": "1"}),
        _NO_QDQ_FUSION,
    ),
    "CPUExecutionProvider": (
        Variant("session.x64quantprecision=1", config_entries={"session.x64quantprecision": "1"}),
        _NO_QDQ_FUSION,
    ),
}
#: ONNX Runtime's documented defaults, so that a variant equal to the cell's own setting is not run.
_DEFAULTS = {"use_tf32": "1", "cudnn_conv_algo_search": "EXHAUSTIVE", "prefer_nhwc": "0",
             "enable_skip_layer_norm_strict_mode": "0", "session.disable_quant_qdq": "0",
             "session.x64quantprecision": "0"}


@dataclass(frozen=True)
class LevelResult:
    level: str
    passed: bool
    failures: tuple[str, ...]
    cosine: float | None  # worst output's cosine against the reference
    top1_agreement_pct: float | None
    cosine_vs_unoptimized: float | None  # worst output's cosine against this feed at ORT_DISABLE_ALL
    max_abs_vs_unoptimized: float | None
    nodes: int | None  # nodes of the optimized graph (None where it could not be saved)
    op_histogram: Mapping[str, int] = field(default_factory=dict)
    error: str = ""  # the session could not be made or run
    departures: tuple[str, ...] = ()  # failures against the unoptimized run (tolerance less top-1 agreement)

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "passed": self.passed, "failures": list(self.failures),
                "cosine": _json(self.cosine), "top1_agreement_pct": _json(self.top1_agreement_pct),
                "cosine_vs_unoptimized": _json(self.cosine_vs_unoptimized),
                "max_abs_vs_unoptimized": _json(self.max_abs_vs_unoptimized), "nodes": self.nodes,
                "op_histogram": dict(self.op_histogram), "error": self.error, "departures": list(self.departures)}


@dataclass(frozen=True)
class VariantResult:
    """The cell's level with one setting changed (``Variant``), judged against the reference and the cell's run."""

    label: str
    passed: bool
    failures: tuple[str, ...]
    cosine: float | None
    top1_agreement_pct: float | None
    cosine_vs_cell: float | None
    max_abs_vs_cell: float | None
    departures: tuple[str, ...] = ()  # failures against the cell's own run (tolerance less top-1 agreement)
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"setting": self.label, "passed": self.passed, "failures": list(self.failures),
                "cosine": _json(self.cosine), "top1_agreement_pct": _json(self.top1_agreement_pct),
                "cosine_vs_cell": _json(self.cosine_vs_cell), "max_abs_vs_cell": _json(self.max_abs_vs_cell),
                "departures": list(self.departures), "error": self.error}


@dataclass(frozen=True)
class NodeDiff:
    """What the first failing level's optimized graph has that the last passing level's has not, and back. A node
    counts as new where its name or its op type is (``name (OpType)``): fusions keep the replaced node's name."""

    new_ops: Mapping[str, int]
    gone_ops: Mapping[str, int]
    new_nodes: tuple[str, ...]
    gone_nodes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"new_ops": dict(self.new_ops), "gone_ops": dict(self.gone_ops), "new_nodes": list(self.new_nodes),
                "gone_nodes": list(self.gone_nodes)}


@dataclass(frozen=True)
class BisectReport:
    levels: tuple[LevelResult, ...]
    lowest_breaking: str | None
    last_good: str | None
    diff: NodeDiff | None
    onnxruntime: str
    providers: tuple[str, ...]
    model: str
    # Where the unoptimized run already fails: the lowest level that departs from it, the level below, their diff.
    lowest_changing: str | None = None
    last_unchanged: str | None = None
    # The cell's own level, and the provider's settings tried there one at a time.
    cell_level: str | None = None
    variants: tuple[VariantResult, ...] = ()

    @property
    def settings_conclusion(self) -> str:
        """What the provider settings tried at the cell's level change: the verdict, the numbers, or nothing."""
        cell = next((r for r in self.levels if r.level == self.cell_level and not r.error), None)
        ran = [v for v in self.variants if not v.error]
        if cell is None or not ran:
            return ""
        passing = [v.label for v in ran if v.passed]
        failing = [v.label for v in ran if not v.passed]
        changing = [v.label for v in ran if v.departures]
        if not cell.passed and passing:
            return f"it passes with {_listed(passing)}"
        if cell.passed and failing:
            return f"{_listed(failing)} {'breaks' if len(failing) == 1 else 'break'} it"
        if changing:
            return (f"{_listed(changing)} {'changes' if len(changing) == 1 else 'change'} the numbers beyond "
                    "tolerance, not the verdict")
        return f"none of the {len(ran)} settings tried changes the result beyond tolerance"

    @property
    def conclusion(self) -> str:
        if self.lowest_breaking is None:
            return "passes at every optimization level with this feed: no level breaks it"
        if self.last_good is None:
            text = (f"fails already at {self.lowest_breaking}, without any graph optimization: the file itself (for a "
                    "QDQ file, its quantization, which ONNX Runtime runs unfused there) or its unfused kernels are "
                    "at fault")
            if self.lowest_changing is None:
                return text + "; no optimization level changes the result beyond tolerance"
            changed = next(r for r in self.levels if r.level == self.lowest_changing)
            return (text + f"; and {self.lowest_changing} makes it worse: it departs from the unoptimized run "
                    f"(cosine {_fmt(changed.cosine_vs_unoptimized, '.6f')} against it; "
                    f"{self.last_unchanged} does not)")
        return f"{self.lowest_breaking} breaks the result; {self.last_good} passes"

    def text(self) -> str:
        """A few lines for a failure message or an upstream report."""
        lines = [f"onnxruntime {self.onnxruntime} {', '.join(self.providers)} optimization bisect of {self.model}: "
                 f"{self.conclusion}"]
        lines.append(f"  {'level':<20} {'verdict':<7} {'cosine':>9} {'top-1 %':>8} {'cos vs DISABLE_ALL':>19} "
                     f"{'nodes':>6}")
        for r in self.levels:
            verdict = "error" if r.error else ("pass" if r.passed else "FAIL")
            lines.append(f"  {r.level:<20} {verdict:<7} {_fmt(r.cosine, '.6f'):>9} "
                         f"{_fmt(r.top1_agreement_pct, '.1f'):>8} {_fmt(r.cosine_vs_unoptimized, '.6f'):>19} "
                         f"{r.nodes if r.nodes is not None else 'n/a':>6}"
                         + (f"  {r.error}" if r.error else ""))
        if self.diff is not None:
            worse, better = ((self.lowest_breaking, self.last_good) if self.last_good is not None
                             else (self.lowest_changing, self.last_unchanged))
            lines.append(f"  new in {worse} (vs {better}): {_ops(self.diff.new_ops)}"
                         + (f"; e.g. {', '.join(self.diff.new_nodes[:_SHOWN_NAMES])}" if self.diff.new_nodes else ""))
            lines.append(f"  gone: {_ops(self.diff.gone_ops)}")
        if self.variants:
            lines.append(f"  {self.providers[0]} settings at {self.cell_level}, one at a time: "
                         f"{self.settings_conclusion or 'none ran'}")
            lines.append(f"  {'setting':<38} {'verdict':<7} {'cosine':>9} {'top-1 %':>8} {'cos vs cell':>12}")
            for v in self.variants:
                verdict = "error" if v.error else ("pass" if v.passed else "FAIL")
                lines.append(f"  {v.label:<38} {verdict:<7} {_fmt(v.cosine, '.6f'):>9} "
                             f"{_fmt(v.top1_agreement_pct, '.1f'):>8} {_fmt(v.cosine_vs_cell, '.6f'):>12}"
                             + (f"  {v.error}" if v.error else ""))
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"onnxruntime": self.onnxruntime, "providers": list(self.providers), "model": self.model,
                "lowest_breaking": self.lowest_breaking, "last_good": self.last_good, "conclusion": self.conclusion,
                "lowest_changing": self.lowest_changing, "last_unchanged": self.last_unchanged,
                "levels": [r.as_dict() for r in self.levels],
                "diff": None if self.diff is None else self.diff.as_dict(), "cell_level": self.cell_level,
                "settings_conclusion": self.settings_conclusion, "variants": [v.as_dict() for v in self.variants]}


def available_levels() -> tuple[str, ...]:
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

    return tuple(level for level in LEVELS if hasattr(ort.GraphOptimizationLevel, level))


def bisect_optimizations(onnx_path: Path | str, feed: Mapping[str, np.ndarray],
                         reference_outputs: Mapping[str, np.ndarray], tolerance: Tolerance, providers: Sequence[Any],
                         output_names: Sequence[str] | None = None,
                         session_options: Callable[[], ort.SessionOptions] | None = None,
                         workdir: Path | None = None,
                         variants: Sequence[Variant] | None = None) -> BisectReport:
    """Run ``onnx_path`` on ``feed`` at every graph optimization level and judge each against
    ``reference_outputs`` with ``tolerance``; then, at the cell's own level, each of ``variants`` (default: the
    first provider's ``PROVIDER_VARIANTS``, less those equal to the cell's own setting).

    ``output_names``: which outputs to judge (default: the reference's). ``session_options`` makes the cell's
    SessionOptions (threads, level...) afresh; the bisect overrides its optimization level. ``workdir`` keeps each
    level's optimized model as ``<level>.onnx`` (a temporary folder by default)."""
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()
    names = list(output_names or reference_outputs)
    probe = _Probe(ort, str(onnx_path), feed, names, {n: reference_outputs[n] for n in names}, tolerance,
                   session_options or ort.SessionOptions)
    cell_level = next((level for level in available_levels()
                       if getattr(ort.GraphOptimizationLevel, level) == probe.make().graph_optimization_level), None)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(workdir) if workdir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        results, graphs, level_outputs = _run_levels(probe, providers, folder)
    breaking, last_good, changing, unchanged = _first_departures(results)
    diff = None
    pair = (last_good, breaking) if last_good is not None else (unchanged, changing)
    if pair[0] is not None and pair[1] is not None:
        good, bad = graphs.get(pair[0].level), graphs.get(pair[1].level)
        if good is not None and bad is not None:
            diff = diff_graphs(good, bad)
    provider_names = tuple(_split(p)[0] for p in providers)
    tried: tuple[VariantResult, ...] = ()
    if cell_level is not None and cell_level in level_outputs:
        tried = _run_variants(probe, providers, cell_level, level_outputs[cell_level],
                              variants if variants is not None else default_variants(providers, probe.make))
    return BisectReport(tuple(results), None if breaking is None else breaking.level,
                        None if last_good is None else last_good.level, diff, ort.__version__, provider_names,
                        str(onnx_path), None if changing is None else changing.level,
                        None if unchanged is None else unchanged.level, cell_level, tried)


@dataclass(frozen=True)
class _Probe:
    """One file, feed and reference: sessions at a level (or with a setting changed), and their outputs judged."""

    ort: Any
    onnx_path: str
    feed: Mapping[str, np.ndarray]
    names: list[str]
    reference: Mapping[str, np.ndarray]
    tolerance: Tolerance
    make: Callable[[], Any]

    @property
    def against_unoptimized(self) -> Tolerance:
        """The tolerance against another run of the same file: less top-1 agreement (near-tied logits)."""
        return dataclasses.replace(self.tolerance, min_top1_agreement_pct=None)

    def options_at(self, level: str) -> ort.SessionOptions:
        options = self.make()
        options.graph_optimization_level = getattr(self.ort.GraphOptimizationLevel, level)
        if options.log_severity_level < 3:
            options.log_severity_level = 3  # ENABLE_ALL warns that NCHWc graphs are hardware specific
        return options

    def run(self, options: ort.SessionOptions, providers: Sequence[Any]) -> dict[str, np.ndarray]:
        from engines.onnx.intermediates import session_inputs

        session = self.ort.InferenceSession(self.onnx_path, options, providers=list(providers))
        return dict(zip(self.names, session.run(self.names, session_inputs(session, self.feed)), strict=True))

    def judged(self, outputs: Mapping[str, np.ndarray]) -> tuple[tuple[str, ...], float | None, float | None]:
        """Failures against the reference, worst cosine, worst top-1 agreement."""
        reports = compare_outputs(self.reference, outputs, self.tolerance)
        return (tuple(f"{n}: {f}" for n, r in reports.items() for f in r.failures),
                _worst(r.cosine for r in reports.values()),
                _worst(r.top1_agreement_pct for r in reports.values() if r.top1_agreement_pct is not None))


def _run_levels(probe: _Probe, providers: Sequence[Any], folder: Path) -> tuple[
        list[LevelResult], dict[str, onnx.ModelProto | None], dict[str, dict[str, np.ndarray]]]:
    """Each available level run and judged, against the reference and against the unoptimized run; its optimized
    graph written to ``folder`` and loaded. Returns the results, the graphs and the outputs by level."""
    results: list[LevelResult] = []
    graphs: dict[str, onnx.ModelProto | None] = {}
    level_outputs: dict[str, dict[str, np.ndarray]] = {}
    unoptimized: dict[str, np.ndarray] | None = None
    for level in available_levels():
        options = probe.options_at(level)
        options.optimized_model_filepath = str(folder / f"{level}.onnx")
        try:
            outputs = probe.run(options, providers)
        except Exception as exc:
            graphs[level] = None
            results.append(LevelResult(level, False, ("session failed",), None, None, None, None, None,
                                       error=_first_line(exc)))
            continue
        level_outputs[level] = outputs
        graph = _load(folder / f"{level}.onnx")
        graphs[level] = graph
        failures, cosine, top1 = probe.judged(outputs)
        if unoptimized is None and level == "ORT_DISABLE_ALL":
            unoptimized = outputs
        cos_u = max_u = None
        departures: tuple[str, ...] = ()
        if unoptimized is not None:
            cos_u, max_u, departures = _against(unoptimized, outputs, probe.against_unoptimized)
        results.append(LevelResult(
            level, not failures, failures, cosine, top1, cos_u, max_u,
            None if graph is None else len(graph.graph.node),
            {} if graph is None else _histogram(graph), departures=departures))
    return results, graphs, level_outputs


def _first_departures(results: list[LevelResult]) -> tuple[LevelResult | None, LevelResult | None,
                                                            LevelResult | None, LevelResult | None]:
    """(breaking, last good, changing, unchanged): the lowest level that fails and the last passing one below it;
    where the unoptimized run already fails, the first level that departs from it and the last one below that
    does not."""
    breaking = next((r for r in results if not r.passed and not r.error), None)
    last_good = None
    if breaking is not None:
        below = results[:results.index(breaking)]
        last_good = next((r for r in reversed(below) if r.passed), None)
    changing = unchanged = None
    if breaking is not None and last_good is None and results and results[0].level == "ORT_DISABLE_ALL":
        # already wrong unoptimized: does an optimization make it worse still?
        changing = next((r for r in results[1:] if r.departures and not r.error), None)
        if changing is not None:
            below = results[:results.index(changing)]
            unchanged = next((r for r in reversed(below) if not r.departures and not r.error), None)
    return breaking, last_good, changing, unchanged


def _run_variants(probe: _Probe, providers: Sequence[Any], cell_level: str, cell_outputs: Mapping[str, np.ndarray],
                  variants: Sequence[Variant]) -> tuple[VariantResult, ...]:
    """Each variant at the cell's level, judged against the reference and against the cell's own run."""
    tried: list[VariantResult] = []
    for variant in variants:
        options = probe.options_at(cell_level)
        for key, value in variant.config_entries.items():
            options.add_session_config_entry(key, value)
        try:
            outputs = probe.run(options, _with_options(providers, variant.provider_options))
        except Exception as exc:
            tried.append(VariantResult(variant.label, False, ("session failed",), None, None, None, None,
                                       error=_first_line(exc)))
            continue
        failures, cosine, top1 = probe.judged(outputs)
        tried.append(VariantResult(variant.label, not failures, failures, cosine, top1,
                                   *_against(cell_outputs, outputs, probe.against_unoptimized)))
    return tuple(tried)


def _against(base: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
             tolerance: Tolerance) -> tuple[float | None, float | None, tuple[str, ...]]:
    """Worst cosine, largest difference and failures of ``outputs`` against another run of the same file. Outputs
    equal to it, NaN for NaN, do not depart: an overflowing cell's NaN is the same at every level."""
    if all(np.array_equal(base[n], outputs[n], equal_nan=True) for n in base):
        return 1.0, 0.0, ()
    same = compare_outputs(base, outputs, tolerance)
    return (_worst(r.cosine for r in same.values()), max((r.max_abs_error for r in same.values()), default=None),
            tuple(f"{n}: {f}" for n, r in same.items() for f in r.failures))


def default_variants(providers: Sequence[Any], session_options: Callable[[], Any]) -> tuple[Variant, ...]:
    """The first provider's ``PROVIDER_VARIANTS``, less each whose setting the cell already has (its own provider
    options, session config entries, or ONNX Runtime's default)."""
    name, given = _split(providers[0] if providers else "CPUExecutionProvider")
    options = session_options()

    def current(key: str) -> str:
        if key in given:
            return str(given[key])
        try:
            return str(options.get_session_config_entry(key))
        except Exception:  # not set: ONNX Runtime raises for an absent key
            return _DEFAULTS.get(key, "")

    return tuple(v for v in PROVIDER_VARIANTS.get(name, ())
                 if any(current(k) != val for k, val in {**v.provider_options, **v.config_entries}.items()))


def _with_options(providers: Sequence[Any], extra: Mapping[str, str]) -> list[Any]:
    """``providers`` with ``extra`` merged into the first one's options."""
    if not extra:
        return list(providers)
    name, given = _split(providers[0])
    return [(name, {**given, **extra}), *providers[1:]]


def _split(provider: Any) -> tuple[str, dict[str, Any]]:
    """A provider as ONNX Runtime takes it (a name, or a name and its options) -> (name, options)."""
    return (provider, {}) if isinstance(provider, str) else (provider[0], dict(provider[1]))


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def diff_graphs(good: onnx.ModelProto, bad: onnx.ModelProto) -> NodeDiff:
    """Op types (counted, with their domain) and nodes in ``bad`` but not ``good``, and the reverse. A node is
    identified by its name and op type: ONNX Runtime's QDQ fusion turns ``node_Conv_869`` (Conv) into
    ``node_Conv_869`` (QLinearConv), which a diff of names alone misses."""
    hg, hb = Counter(_histogram(good)), Counter(_histogram(bad))
    keys_g = {(n.name, _op(n)) for n in good.graph.node}
    keys_b = {(n.name, _op(n)) for n in bad.graph.node}
    return NodeDiff(dict((hb - hg).most_common()), dict((hg - hb).most_common()),
                    tuple(f"{n.name} ({_op(n)})" for n in bad.graph.node if (n.name, _op(n)) not in keys_g),
                    tuple(f"{n.name} ({_op(n)})" for n in good.graph.node if (n.name, _op(n)) not in keys_b))


def _op(node: onnx.NodeProto) -> str:
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _histogram(model: onnx.ModelProto) -> dict[str, int]:
    return dict(sorted(Counter(_op(n) for n in model.graph.node).items()))


def _load(path: Path) -> onnx.ModelProto | None:
    try:
        return onnx.load(str(path), load_external_data=False) if path.is_file() else None
    except Exception:  # the saved graph is a diagnostic; a level's verdict does not depend on it
        return None


def _worst(values: Any) -> float | None:
    finite = [float(v) for v in values if v is not None]
    if not finite:
        return None
    return min(finite, key=lambda v: v if not math.isnan(v) else -math.inf)


def _listed(labels: Sequence[str]) -> str:
    return ", ".join(labels[:-1]) + (" and " if len(labels) > 1 else "") + labels[-1]


def _ops(histogram: Mapping[str, int]) -> str:
    return ", ".join(f"{n} x {op}" for op, n in histogram.items()) or "nothing"


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:{spec}}"


def _json(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)
