"""Per-layer comparison for localization: which layer's output first leaves the tolerance, and which are worst.

Input: the layers of one network in topological order, each a (name, op type, reference array, engine array)
pair of the same tensor seen in the fp32 reference and in the engine under test. Output: one ``LayerStat`` per
layer (max abs error, cosine, isclose %, relative error, non-finite counts, the checks it failed), the first layer
that failed, the worst N, and the layers ranked by how much their error rises over their inputs' (``born``).

Where a drift is born: a drift that fails the output but no layer has no first divergent layer, and the worst
layers are where the error has accumulated most, downstream of the change. Each layer whose pair names its inputs
(the compared tensors that feed its node on the reference graph) gets a ``rise``: its relative error
``||engine - reference|| / ||reference||`` over the largest of its inputs' (a tensor that is not a compared layer,
a graph input, counts 0: both sides read the same feed), at least ``RISE_FLOOR``. A layer that only carries its
inputs' error on reads about 1; the layer where the change is made reads its own error over float32 rounding.
Relative error, not 1 - cosine: it is scale-free and about linear in the perturbation, so a ratio compares a
layer with its inputs; 1 - cosine is its square for small errors and would square the ratios' noise too.

Pure numpy, and nothing else of this repository: any object with the fields of ``metrics.Tolerance`` (rtol,
atol, min_isclose_pct, and optionally max_abs_error and min_cosine) is accepted. ``min_top1_agreement_pct`` is
not applied per layer: an intermediate tensor's columns are not classes.

Which checks gate a layer: NaN/Inf always; ``min_cosine`` and ``max_abs_error`` when the tolerance sets them;
``min_isclose_pct`` only when it sets no ``min_cosine`` (``gate_isclose=None``, the default; True or False force
it). Why: rtol/atol are sized for the model's outputs, and an intermediate tensor has its own scale. Measured:
in EfficientNet-Lite0 at torch fp16, a cell that passes parity (logits cosine 0.99998), 11 of 168 module outputs
have isclose 71.7-75.0% against fp16's 75% at cosine >= 0.99997: fp16's own rounding, not a divergence, and
the first of them would hide a real fault further on. isclose % is always measured and shown. Blind spot of
cosine: a tensor scaled by a constant keeps cosine 1.0; the final output's parity verdict still catches it.

Non-finite values fail a layer, with two exceptions, both masks: an infinity that the reference has too, with
the same sign at the same position (a -inf attention mask), is the network's own value, not a divergence; and
where the reference holds float32's own limit (+-3.4028235e38, what ``torch.finfo(torch.float32).min`` masks
write for -inf), an engine value of the same sign at or beyond fp16's limit (65504, or inf) is the same sentinel
as a narrower type holds it. Measured: MiniLM-L6 at ONNX Runtime CUDA fp16 (H100, a cell that passes parity at
cosine 0.999999), the attention-mask Add of layer 0 had 26,518 such -inf and was named first divergent, which
would have hidden any real fault of every fp16 transformer. Every other NaN or Inf, in the engine or in the fp32
reference, fails the layer it appears in. Statistics are computed over the positions finite in both arrays,
sentinel positions left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .parity import _as_float64, _cosine  # one widening and one overflow-safe cosine for every metric

__all__ = [
    "LayerComparison",
    "LayerPair",
    "LayerStat",
    "LayerTolerance",
    "compare_layer",
    "compare_layers",
    "error_rise",
    "format_layer_table",
]

FloatArray = npt.NDArray[np.float64]

#: Default number of rows in ``LayerComparison.worst``.
DEFAULT_TOP = 10
#: The smallest input error a rise is measured against: about 8 float32 epsilons, the rounding two fp32 kernels
#: of the same layer differ by (the layer-drift table's noise floor too, metrics/layer_drift.py). Below it an
#: input counts as exact, so an unchanged layer fed by the graph's input does not read as a rise.
RISE_FLOOR = 1e-6


class LayerTolerance(Protocol):
    """The fields of metrics.Tolerance that a per-layer verdict uses."""

    @property
    def rtol(self) -> float: ...

    @property
    def atol(self) -> float: ...

    @property
    def min_isclose_pct(self) -> float: ...


@dataclass(frozen=True)
class LayerPair:
    """One tensor of the network as the reference and the engine computed it.

    ``scope``: where it comes from in the source model (a torch module path), if known; shown beside the name.
    ``note``: how the engine's value was obtained when that is not the obvious (dequantized, NHWC->NCHW...).
    ``inputs``: the tensors that feed this tensor's node on the reference graph, each the nearest compared layer
    upstream (or a graph input); empty where the topology is unknown (torch hooks), and then no ``rise``.
    """

    name: str
    op_type: str
    reference: Any
    engine: Any
    scope: str = ""
    note: str = ""
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayerStat:
    """One layer's figures and verdict. NaN figures (nothing finite to compare) are None in ``as_dict``."""

    index: int
    name: str
    op_type: str
    shape: tuple[int, ...]
    max_abs_error: float
    cosine: float
    isclose_pct: float
    ref_max_abs: float
    nonfinite_ref: int
    nonfinite_engine: int
    failures: tuple[str, ...]
    scope: str = ""
    note: str = ""
    rel_error: float = math.nan
    inputs: tuple[str, ...] = ()
    rise: float = math.nan  # rel_error over the inputs' largest (error_rise); NaN: no topology or nothing finite

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def label(self) -> str:
        """``name`` with its scope, as shown in tables."""
        return f"{self.name} [{self.scope}]" if self.scope else self.name

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "scope": self.scope,
            "op_type": self.op_type,
            "shape": list(self.shape),
            "max_abs_error": _json_float(self.max_abs_error),
            "cosine": _json_float(self.cosine),
            "isclose_pct": _json_float(self.isclose_pct),
            "ref_max_abs": _json_float(self.ref_max_abs),
            "rel_error": _json_float(self.rel_error),
            "rise": _json_float(self.rise),
            "nonfinite_ref": self.nonfinite_ref,
            "nonfinite_engine": self.nonfinite_engine,
            "failures": list(self.failures),
            "passed": self.passed,
            "note": self.note,
        }


@dataclass(frozen=True)
class LayerComparison:
    """Every layer in topological order, the first that failed, the ``top`` worst, and the ``top`` whose error
    rises most over their inputs' (``born``: where a drift starts rather than where it has accumulated)."""

    layers: tuple[LayerStat, ...]
    first_divergent: LayerStat | None
    worst: tuple[LayerStat, ...]
    born: tuple[LayerStat, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "first_divergent": None if self.first_divergent is None else self.first_divergent.as_dict(),
            "worst": [s.as_dict() for s in self.worst],
            "born": [s.as_dict() for s in self.born],
            "layers_compared": len(self.layers),
            "layers_failed": sum(1 for s in self.layers if not s.passed),
            # every layer's error, compact: what a later run's table is compared with (metrics/layer_drift.py)
            "layers": [{"name": s.label, "op_type": s.op_type, "max_abs_error": _json_float(s.max_abs_error),
                        "cosine": _json_float(s.cosine)} for s in self.layers],
        }


#: A mask's "minus infinity" as float32 writes it, and the smallest limit of a type an engine computes in.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FP16_MAX = float(np.finfo(np.float16).max)


def compare_layer(index: int, pair: LayerPair, tol: LayerTolerance, gate_isclose: bool | None = None) -> LayerStat:
    """Figures and verdict of one layer (see the module docstring for the rules)."""
    min_cosine = getattr(tol, "min_cosine", None)
    if gate_isclose is None:
        gate_isclose = min_cosine is None
    r = _as_float64(pair.reference, f"reference {pair.name!r}")
    t = _as_float64(pair.engine, f"engine {pair.name!r}")
    if r.shape != t.shape:
        raise ValueError(f"layer {pair.name!r}: shape mismatch: reference {r.shape} vs engine {t.shape}")
    fr, ft = np.isfinite(r), np.isfinite(t)
    # the same infinity on both sides is the network's own value (a mask), not a divergence; so is float32's
    # limit in the reference where the engine holds its own limit or inf of the same sign (see the docstring)
    same_sign = np.sign(r) == np.sign(t)
    sentinel = (np.abs(r) >= _FLOAT32_MAX) & (np.abs(t) >= _FP16_MAX) & same_sign
    same_inf = (np.isinf(r) & np.isinf(t) & same_sign) | sentinel
    both = fr & ft & ~sentinel
    nonfinite_ref = int(np.count_nonzero(~fr & ~same_inf))
    nonfinite_engine = int(np.count_nonzero(~ft & ~same_inf))
    rr, tt = r[both], t[both]
    if rr.size:
        diff = np.abs(tt - rr)
        max_abs = float(np.max(diff))
        isclose = 100.0 * int(np.count_nonzero(diff <= tol.atol + tol.rtol * np.abs(rr))) / rr.size
        cosine = _cosine(rr, tt)
        ref_max = float(np.max(np.abs(rr)))
        rel_error = _relative_error(rr, diff, ref_max)
    else:
        max_abs = isclose = cosine = ref_max = rel_error = math.nan

    failures: list[str] = []
    if nonfinite_ref:
        failures.append(f"reference has {nonfinite_ref} NaN/Inf")
    if nonfinite_engine:
        failures.append(f"engine has {nonfinite_engine} NaN/Inf")
    if rr.size:
        # written as `not (ok)` so that a NaN figure fails
        if gate_isclose and not (isclose >= tol.min_isclose_pct):
            failures.append(f"isclose {isclose:.2f}% < {tol.min_isclose_pct:.2f}%")
        max_abs_error = getattr(tol, "max_abs_error", None)
        if max_abs_error is not None and not (max_abs <= max_abs_error):
            failures.append(f"max abs {max_abs:.3g} > {max_abs_error:.3g}")
        if min_cosine is not None and not (cosine >= min_cosine):
            failures.append(f"cosine {cosine:.6f} < {min_cosine:g}")
    elif r.size and not same_inf.all():
        failures.append("no position is finite in both")
    return LayerStat(index=index, name=pair.name, op_type=pair.op_type, shape=tuple(int(d) for d in r.shape),
                     max_abs_error=max_abs, cosine=cosine, isclose_pct=isclose, ref_max_abs=ref_max,
                     nonfinite_ref=nonfinite_ref, nonfinite_engine=nonfinite_engine, failures=tuple(failures),
                     scope=pair.scope, note=pair.note, rel_error=rel_error, inputs=pair.inputs)


def compare_layers(layers: Iterable[LayerPair | Sequence[Any]], tol: LayerTolerance, top: int = DEFAULT_TOP,
                   gate_isclose: bool | None = None) -> LayerComparison:
    """Compare each layer (in the order given, which must be topological) and pick the first failure, the
    ``top`` worst (failed layers first, then by non-finite count, lowest cosine, lowest isclose %) and the ``top``
    with the largest rise over their inputs (``error_rise``).
    ``gate_isclose``: see the module docstring (None: only when ``tol`` sets no min_cosine)."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise ValueError(f"top must be an int >= 0, got {top!r}")
    stats = error_rise(compare_layer(i, _pair(layer), tol, gate_isclose) for i, layer in enumerate(layers))
    first = next((s for s in stats if not s.passed), None)
    worst = tuple(sorted(stats, key=_severity)[:top])
    born = tuple(sorted((s for s in stats if not math.isnan(s.rise)), key=_rising)[:top])
    return LayerComparison(layers=stats, first_divergent=first, worst=worst, born=born)


def error_rise(stats: Iterable[LayerStat], floor: float = RISE_FLOOR) -> tuple[LayerStat, ...]:
    """Each layer with its ``rise``: its relative error over the largest relative error of its ``inputs``, that
    largest taken as at least ``floor``. An input that is no compared layer (a graph input) counts 0; a layer
    without inputs, or whose own error or an input's is NaN (nothing finite), gets NaN (not ranked)."""
    layers = tuple(stats)
    error = {s.name: s.rel_error for s in layers}
    out = []
    for s in layers:
        rise = math.nan
        if s.inputs:
            upstream = [error.get(name, 0.0) for name in s.inputs]
            if not any(math.isnan(e) for e in (s.rel_error, *upstream)):
                rise = s.rel_error / max(floor, *upstream)
        out.append(replace(s, rise=rise))
    return tuple(out)


def format_layer_table(rows: Sequence[LayerStat], first: LayerStat | None = None, name_width: int = 40) -> str:
    """A short fixed-width table: position, layer (with scope), op type, max abs error, cosine, isclose %, verdict.
    The row of ``first`` is marked with ``>``."""
    head = (f"  {'#':>4}  {'layer':<{name_width}}  {'op':<18}  {'max abs err':>11}  {'cosine':>9}  {'isclose':>8}  "
            "verdict")
    lines = [head]
    for s in rows:
        mark = ">" if first is not None and s.index == first.index else " "
        label = _clip(s.label, name_width)
        verdict = "ok" if s.passed else "; ".join(s.failures)
        lines.append(f"{mark} {s.index:>4}  {label:<{name_width}}  {_clip(s.op_type, 18):<18}  "
                     f"{_fmt(s.max_abs_error, '.3e'):>11}  {_fmt(s.cosine, '.6f'):>9}  "
                     f"{_fmt(s.isclose_pct, '.1f', '%'):>8}  {verdict}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- helpers


def _pair(layer: LayerPair | Sequence[Any]) -> LayerPair:
    if isinstance(layer, LayerPair):
        return layer
    if len(layer) not in (4, 5):
        raise ValueError(f"a layer is (name, op_type, reference, engine[, scope]); got {len(layer)} items")
    return LayerPair(str(layer[0]), str(layer[1]), layer[2], layer[3], str(layer[4]) if len(layer) == 5 else "")


def _relative_error(reference: FloatArray, diff: FloatArray, ref_max: float) -> float:
    """``||diff|| / ||reference||``, scaled by the largest value first so that squares neither overflow nor
    underflow; 0 where both are 0, inf where only the reference is."""
    if ref_max == 0.0:
        return 0.0 if not np.any(diff) else math.inf
    return float(np.linalg.norm(diff / ref_max) / np.linalg.norm(reference / ref_max))


def _rising(s: LayerStat) -> tuple[float, float, int]:
    """Sort key of ``born``: the largest rise first, then the larger error, then the earlier layer."""
    return (-s.rise, -s.rel_error, s.index)


def _severity(s: LayerStat) -> tuple[int, int, float, float, int]:
    """Sort key, most severe first; NaN figures sort as the worst possible."""
    cos = s.cosine if not math.isnan(s.cosine) else -math.inf
    isclose = s.isclose_pct if not math.isnan(s.isclose_pct) else -math.inf
    return (int(s.passed), -(s.nonfinite_engine + s.nonfinite_ref), cos, isclose, s.index)


def _json_float(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _fmt(x: float, spec: str, suffix: str = "") -> str:
    return "n/a" if math.isnan(x) else f"{x:{spec}}{suffix}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]
