"""What the suite's attribution sees of an ONNX model on ONNX Runtime, for the seeded corpus and the int8 keep-set.

The same figures the suite records for a cell, from the same code: per-node times from ONNX Runtime's profiler
(metrics/node_profile.py, as ``OnnxRuntimeRunner.node_profile``; here both sides of a change in interleaved
rounds, each in two sessions created A B B A), the compute nodes as run (the precision census of the optimized
graph, as suite/session.py counts them), and the localizer's per-layer table (engines/onnx/intermediates.py with
metrics/localize.py). And for the keep-set: an int8 QDQ graph with some nodes given back their fp32 inputs (what
``quantize_static(nodes_to_exclude=...)`` leaves unquantized), judged by metrics.compare_outputs.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from engines.onnx.intermediates import collect_layer_pairs, session_inputs
from engines.onnx.precision_census import precision_census
from engines.ort_import import import_onnxruntime
from metrics import Tolerance, compare_outputs
from metrics.localize import LayerComparison, compare_layers
from metrics.node_profile import mean_rounds, node_round_times_us

CPU = ["CPUExecutionProvider"]


def session_options(level: str = "ORT_ENABLE_ALL", threads: int = 1) -> Any:
    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def _session(model: onnx.ModelProto | Path, options: Any, disabled: Iterable[str] = ()) -> Any:
    ort = import_onnxruntime()
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    extra = {"disabled_optimizers": list(disabled)} if disabled else {}
    return ort.InferenceSession(source, options, providers=CPU, **extra)


def profile_rounds(sides: Sequence[tuple[onnx.ModelProto | Path, str, Iterable[str]]],
                   feed: Mapping[str, np.ndarray], rounds: int = 10, runs_per_round: int = 3,
                   warmup: int = 3) -> list[dict[str, list[float]]]:
    """Each side's per-node, per-round median kernel times (us; metrics/node_profile.py ``node_round_times_us``),
    the sides ((model, level, disabled optimizers), each its own profiling session) run in interleaved rounds of
    ``runs_per_round`` runs, in the same order every round: round k of every side ran under the same load, so
    ``round_deltas`` can tell a node that moved from one the machine's load moved. Never alternated (A B, B A, ...):
    the session at the turn then ran twice in a row, and a session that runs on right after itself reads faster
    (ResNet-18's second of two sessions: 11-15 % less node time; in a fixed order 0-1 %, docs/attribution.md)."""
    with tempfile.TemporaryDirectory(prefix="ort-profile-") as tmp:
        sessions = []
        for k, (model, level, disabled) in enumerate(sides):
            options = session_options(level)
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(tmp, f"profile-{k}")
            session = _session(model, options, disabled)
            sessions.append((session, session_inputs(session, feed)))
        for session, ort_feed in sessions:
            for _ in range(warmup):
                session.run(None, ort_feed)
        for _ in range(rounds):
            for session, ort_feed in sessions:
                for _ in range(runs_per_round):
                    session.run(None, ort_feed)
        profiles = []
        for session, _ in sessions:
            with open(session.end_profiling(), encoding="utf-8") as f:
                profiles.append(node_round_times_us(json.load(f), runs_per_round, skip_runs=warmup))
        del sessions
    return profiles


def profile_abba(baseline: tuple[onnx.ModelProto | Path, str, Iterable[str]],
                 current: tuple[onnx.ModelProto | Path, str, Iterable[str]], feed: Mapping[str, np.ndarray],
                 rounds: int = 10, runs_per_round: int = 3,
                 warmup: int = 3) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Both sides' per-node, per-round times from four sessions created and run in the order A B B A every round
    (``profile_rounds``), each side the mean of its two (``mean_rounds``): a bias that grows with a session's place in
    the order of creation or in the round (the load rising through a round), or falls on every second session,
    falls on both sides alike."""
    a1, b1, b2, a2 = profile_rounds([baseline, current, current, baseline], feed, rounds, runs_per_round, warmup)
    return mean_rounds(a1, a2), mean_rounds(b1, b2)


def ops_as_run(model: onnx.ModelProto | Path, level: str = "ORT_ENABLE_ALL",
               disabled: Iterable[str] = ()) -> dict[str, int]:
    """The compute nodes of the optimized graph by op type: the engine facts' ``precision_census.ops``."""
    with tempfile.TemporaryDirectory(prefix="ort-optimized-") as tmp:
        options = session_options(level)
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        _session(model, options, disabled)
        census = precision_census(options.optimized_model_filepath)
    return dict(Counter(n.op_type for n in census.nodes))


def run(model: onnx.ModelProto | Path, feed: Mapping[str, np.ndarray], level: str = "ORT_ENABLE_ALL",
        disabled: Iterable[str] = ()) -> dict[str, np.ndarray]:
    session = _session(model, session_options(level), disabled)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, session_inputs(session, feed)), strict=True))


def layer_table(reference: Path, engine: Path, feed: Mapping[str, np.ndarray], tolerance: Tolerance,
                level: str = "ORT_ENABLE_ALL") -> tuple[LayerComparison, int]:
    """The localizer's comparison of ``engine`` (run at ``level``) with the fp32 ``reference``, and how many
    tensors it could not match (NCHWc layouts, fused-away tensors)."""
    found = collect_layer_pairs(reference, engine, feed, lambda: session_options(level), CPU)
    return compare_layers(found.pairs, tolerance), len(found.unmatched)


# ---------------------------------------------------------------------------------------------------------
# int8: nodes kept in fp32 inside a QDQ graph


def quantized_nodes(qdq: onnx.ModelProto) -> list[str]:
    """Nodes of a QDQ graph that read a DequantizeLinear's output (the quantized compute nodes), in graph order."""
    dq = {o for n in qdq.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return [n.name for n in qdq.graph.node
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and any(i in dq for i in n.input)]


def keep_in_fp32(qdq: onnx.ModelProto, fp32: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """The QDQ graph with each named node reading its fp32 inputs again (the tensors and weights of the same node in
    the fp32 graph), the Q/DQ pairs nobody reads any more removed."""
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    original = {n.name: n for n in fp32.graph.node}
    weights = {i.name: i for i in fp32.graph.initializer}
    present = {i.name for i in out.graph.initializer}
    known = present | {i.name for i in out.graph.input} | {o for n in out.graph.node for o in n.output}
    wanted = set(names)
    for n in out.graph.node:
        if n.name not in wanted:
            continue
        source = original.get(n.name)
        if source is None or len(source.input) != len(n.input):
            raise KeyError(f"{n.name!r} has no counterpart with the same inputs in the fp32 graph")
        for i, name in enumerate(source.input):
            if name in weights and name not in present:
                out.graph.initializer.append(weights[name])
                present.add(name)
                known.add(name)
            if name in known:  # else a Constant the quantizer's pre-processing folded away: keep what it reads
                n.input[i] = name
    _drop_unread(out)
    return out


def _drop_unread(model: onnx.ModelProto) -> None:
    outputs = {o.name for o in model.graph.output}
    while True:
        read = {i for n in model.graph.node for i in n.input} | outputs
        dead = [n for n in model.graph.node if not any(o in read for o in n.output)]
        if not dead:
            break
        for n in dead:
            model.graph.node.remove(n)
    read = {i for n in model.graph.node for i in n.input}
    keep = [i for i in model.graph.initializer if i.name in read]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


def judge(reference: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
          tolerance: Tolerance) -> tuple[bool, float]:
    """(passed, worst cosine) of ``outputs`` against the fp32 ``reference`` with the cell's tolerance."""
    reports = compare_outputs(reference, outputs, tolerance)
    cosines = [r.cosine for r in reports.values() if r.cosine is not None]
    return all(r.passed for r in reports.values()), min(cosines, default=float("nan"))
