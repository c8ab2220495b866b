"""Intermediate tensors of an ONNX model as an engine really computes them, matched to the fp32 export's.

How the engine side is observed (ONNX Runtime): the engine's file is optimized by a session with the engine's
own options and providers (``SessionOptions.optimized_model_filepath``), every tensor of the *optimized* graph
is marked as a graph output, and that graph is replayed with optimizations off. The replay runs the kernels the
deployed session runs (fused QLinearConv, layout transforms, ONNX Runtime's inserted Casts), so what is
compared is the program the cell ran, not a re-optimized variant of it; ``replay_max_abs_diff`` says how
closely the replay's final outputs reproduce the plain session's (0.0 on every model tried). Marking the
*original* file's tensors instead would block every fusion they take part in, which is where int8 and fp16
faults live; that is the fallback only where the optimized graph cannot be saved (the TensorRT EP compiles
its subgraphs), and the report says so.

The reference side is the fp32 export run by ONNX Runtime on the CPU with optimizations off and every node
output marked.

Which engine tensor stands for which reference tensor (the matching rule, docs/localization.md) is
engines/onnx/matching.py's.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto

from engines.onnx.matching import pair_layers, reorder_blocked
from metrics.localize import LayerPair

if TYPE_CHECKING:
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------------
# Marking and running


def mark_all_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose every node output is also a graph output (without a declared type: ONNX
    Runtime infers it, contrib ops included)."""
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    present = {o.name for o in marked.graph.output}
    for node in marked.graph.node:
        for name in node.output:
            if name and name not in present:
                marked.graph.output.append(onnx.ValueInfoProto(name=name))
                present.add(name)
    return marked


def session_inputs(session: ort.InferenceSession, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feed cast to the session's declared input types (the runner does the same)."""
    types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(uint8)": np.uint8,
             "tensor(int8)": np.int8, "tensor(bool)": np.bool_}
    out = {}
    for i in session.get_inputs():
        if i.name not in feed:
            raise ValueError(f"feed lacks input {i.name!r}; it has {sorted(feed)}")
        out[i.name] = np.ascontiguousarray(feed[i.name], dtype=types.get(i.type, None))
    return out


def run_all(model: onnx.ModelProto, feed: Mapping[str, np.ndarray], options: ort.SessionOptions,
            providers: list[Any]) -> dict[str, np.ndarray]:
    """Run ``model`` (already marked) and return every graph output by name."""
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

    session = ort.InferenceSession(model.SerializeToString(), options, providers=providers)
    bfloat16 = [o.name for o in session.get_outputs() if o.type == "tensor(bfloat16)"]
    if bfloat16:  # numpy has no bfloat16: ONNX Runtime cannot hand such a tensor over as it is
        session = ort.InferenceSession(fetch_as_float(model, bfloat16).SerializeToString(), options,
                                       providers=providers)
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, session_inputs(session, feed))
    return {n.removesuffix(AS_FLOAT): np.asarray(v) for n, v in zip(names, values, strict=True)}


#: The suffix of the float32 copy of a bfloat16 tensor that run_all fetches in its place.
AS_FLOAT = "::as_float32"


def fetch_as_float(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` where each of these graph outputs (bfloat16 tensors) is fetched through a Cast to
    float32 (exact: every bfloat16 value is a float32). The Cast only reads the tensor: the nodes that compute
    it, and their fusions, are those of the marked graph."""
    fetched = onnx.ModelProto()
    fetched.CopyFrom(model)
    wanted = set(names)
    outputs = [o for o in fetched.graph.output if o.name not in wanted]
    del fetched.graph.output[:]
    fetched.graph.output.extend(outputs)
    for name in names:
        fetched.graph.node.append(onnx.helper.make_node("Cast", [name], [name + AS_FLOAT], name=name + AS_FLOAT,
                                                        to=TensorProto.FLOAT))
        fetched.graph.output.append(onnx.ValueInfoProto(name=name + AS_FLOAT))
    return fetched


def save_optimized(path: Path, options: ort.SessionOptions, providers: list[Any], dst: Path) -> Path:
    """Let a session with ``options``/``providers`` optimize ``path`` and write the result to ``dst``.

    Raises whatever ONNX Runtime raises, e.g. for graphs holding compiled nodes (the TensorRT EP)."""
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(path), options, providers=providers)
    if not dst.is_file():
        raise RuntimeError(f"onnxruntime wrote no optimized model to {dst}")
    return dst


# ---------------------------------------------------------------------------------------------------------
# The whole ONNX side


@dataclass
class OnnxIntermediates:
    """Matched layers and what the comparison ran on."""

    pairs: list[LayerPair]
    reference_outputs: dict[str, np.ndarray]
    engine_outputs: dict[str, np.ndarray]
    mode: str
    unmatched: list[str]
    replay_max_abs_diff: float | None = None
    optimized_model: Path | None = None
    notes: list[str] = field(default_factory=list)


def reference_arrays(reference_path: Path,
                     feed: Mapping[str, np.ndarray]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The fp32 export and every node output of it, run by ONNX Runtime on the CPU with optimizations off."""
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

    reference = onnx.load(str(reference_path))
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    off.log_severity_level = 3
    return reference, run_all(mark_all_outputs(reference), feed, off, ["CPUExecutionProvider"])


def collect_layer_pairs(reference_path: Path, engine_path: Path, feed: Mapping[str, np.ndarray],
                        engine_options: Callable[[], ort.SessionOptions], providers: list[Any],
                        workdir: Path | None = None) -> OnnxIntermediates:
    """Run the fp32 reference and the engine with every intermediate tensor visible; match them.

    ``engine_options`` makes the engine's SessionOptions (threads, optimization level) afresh for each session.
    ``workdir`` keeps the optimized model as ``engine-optimized.onnx`` (a temporary folder by default)."""
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

    reference, ref_arrays = reference_arrays(reference_path, feed)
    ref_outputs = {o.name: ref_arrays[o.name] for o in reference.graph.output}
    original = onnx.load(str(engine_path))
    output_names = [o.name for o in original.graph.output]
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(workdir) if workdir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        plain = ort.InferenceSession(str(engine_path), engine_options(), providers=providers)
        plain_outputs = dict(zip(output_names, plain.run(output_names, session_inputs(plain, feed)), strict=True))
        optimized: Path | None = folder / "engine-optimized.onnx"
        run: onnx.ModelProto | None
        try:
            assert optimized is not None
            save_optimized(engine_path, engine_options(), providers, optimized)
            run = onnx.load(str(optimized))
            replay = engine_options()
            replay.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            arrays = run_all(mark_all_outputs(reorder_blocked(reference, original, run, ref_arrays)), feed, replay,
                             providers)
            mode = "replay of ONNX Runtime's optimized graph, every tensor marked"
        except Exception as exc:  # compiled nodes (TensorRT EP) cannot be saved
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            notes.append(f"the optimized graph could not be saved ({first}); compared the original file with "
                         "every tensor marked as an output, which blocks the fusions those tensors take part in")
            optimized, run = None, None
            arrays = run_all(mark_all_outputs(original), feed, engine_options(), providers)
            mode = "original graph, every tensor marked (fusions blocked)"
        if workdir is None:
            optimized = None
    engine_outputs = {n: arrays[n] for n in output_names}
    diff = max((_max_difference(engine_outputs[n], v) for n, v in plain_outputs.items()), default=0.0)
    if not diff == 0.0:
        notes.append(f"the instrumented run's outputs differ from the plain session's by up to {diff:.3g}")
    pairs, unmatched = pair_layers(reference, ref_arrays, original, run, arrays)
    return OnnxIntermediates(pairs=pairs, reference_outputs=ref_outputs, engine_outputs=engine_outputs, mode=mode,
                             unmatched=unmatched, replay_max_abs_diff=diff, optimized_model=optimized, notes=notes)


# ---------------------------------------------------------------------------------------------------------
# helpers


def _max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b|, where equal values (the same inf, NaN against NaN) differ by 0; inf where only one is
    finite."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    differ = ~((x == y) | (np.isnan(x) & np.isnan(y)))
    if not differ.any():
        return 0.0
    delta = np.abs(x[differ] - y[differ])
    return float(np.inf) if np.isnan(delta).any() else float(delta.max())
