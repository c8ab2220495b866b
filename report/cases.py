"""How the report names and orders the suite's cases: engines, precisions and latency paths in practitioners'
order, a case's shape and the latency gate's label for it, data sets. Its own module because the tables, the
verdict and report/plots.py all list cases, and must list them alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from suite.gate.baselines import key_label, latency_key

ENGINE_ORDER = ("torch", "onnxruntime", "inductor", "tensorrt")
PRECISION_ORDER = ("fp32", "tf32", "fp16", "bf16", "int8")
PATH_ORDER = ("all", "model", "graph")

#: What each latency path times (tests/latency/test_latency.py).
PATH_MEANING = {
    "all": "host arrays in and out, host<->device copies included: what an application sees",
    "model": "inputs and outputs resident on the device: engine time alone",
    "graph": "a captured CUDA graph replayed",
}


def cell_sort_key(engine: str, precision: str) -> tuple[int, str, int, str]:
    """Reference first, then engines and precisions in the order practitioners list them."""
    e = ENGINE_ORDER.index(engine) if engine in ENGINE_ORDER else len(ENGINE_ORDER)
    p = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)
    return e, engine, p, precision


def path_sort_key(path: str) -> tuple[int, str]:
    return (PATH_ORDER.index(path) if path in PATH_ORDER else len(PATH_ORDER)), path


#: A latency case's shape: its batch and every named axis of the record's ``dims`` ({"seq": 128}), in order.
Shape = tuple[int, tuple[tuple[str, Any], ...]]


def shape_of(record: Mapping[str, Any]) -> Shape:
    """The unit of the latency tables and figures: two cases at batch 8 with seq 128 and 256 are two shapes."""
    dims = record.get("dims")
    named = tuple((str(k), v) for k, v in dims.items()) if isinstance(dims, Mapping) else ()
    return int(record.get("batch_size", 0)), named


def shape_sort_key(shape: Shape) -> tuple[int, tuple[tuple[str, int, Any], ...]]:
    batch, dims = shape
    return batch, tuple((k, 0, v) if isinstance(v, (int, float)) else (k, 1, str(v)) for k, v in dims)


def shape_id(shape: Shape) -> str:
    """As the suite names the case: 'bs8', 'bs8-seq256'. Must equal suite.config.LatencyShape.id (not imported:
    suite.config is heavy), since latency_labels looks the gate's outcomes up by it."""
    batch, dims = shape
    return "-".join([f"bs{batch}", *(f"{k}{v}" for k, v in dims)])


def shape_label(shape: Shape) -> str:
    """For people: 'bs8', 'bs8 x seq256'."""
    return shape_id(shape).replace("-", " x ")


def shape_title(shape: Shape) -> str:
    """'batch 8', 'batch 8 x seq 256'."""
    batch, dims = shape
    return " x ".join([f"batch {batch}", *(f"{k} {v}" for k, v in dims)])


def latency_labels(record: Mapping[str, Any]) -> list[str]:
    """The latency gate's labels this record may carry, most specific first: suite/gate/baselines.py key_label of
    latency_key (what the gate labels its outcomes with), its shape in turn the record's own 'shape', its
    shape_id and 'bs{batch}', so that 'bs8-seq256' finds its outcome and a record saved before shapes existed
    still does. None where the gate has no key for the record (no model, engine or precision, say)."""
    key = latency_key(record)
    if key is None:
        return []
    model, engine, precision, _, path = key
    shapes = [record.get("shape"), shape_id(shape_of(record)), f"bs{record.get('batch_size')}"]
    return list(dict.fromkeys(key_label((model, engine, precision, str(s), path)) for s in shapes if s))


def is_generated(dataset: Any) -> bool:
    return str(dataset or "").startswith("generated:")


def dataset_text(dataset: Any) -> str:
    d = str(dataset or "")
    return f"generated inputs ({d.partition(':')[2]})" if is_generated(d) else (d or "-")
