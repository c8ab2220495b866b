"""Latency and throughput per model, engine, precision, batch size and path, recorded by pytest-benchmark.

Paths: ``all`` is host arrays in and out (host<->device copies included, what an application sees);
``model`` keeps inputs and outputs resident on the device (engine time alone); ``graph`` replays a
captured CUDA graph where the engine allows it. On CPU only ``all`` exists.

The suite's gate is ``--latency-baseline`` (docs/gating.md); the case names are stable so baselines
line up. A case measured while other processes used the CPUs is re-measured (suite/gate_plugin.py).
``--benchmark-disable`` runs each case once as a smoke test, as pytest-benchmark users expect.
"""

import math
import statistics
import time

import pytest

from metrics import summarize_latency
from suite.bound import classify
from suite.inputs import synthetic_feed, tile_to_batch

pytestmark = pytest.mark.latency


def test_latency(latency_case, suite, engine_for, benchmark, request, latency_wrapper, gate):
    cell, shape, path = latency_case
    batch, dims = shape.batch, shape.dims_dict()
    model = suite.model(cell.model)
    engine = engine_for(cell)
    if model.parity_dataset:
        feed = tile_to_batch(suite.dataset(model.parity_dataset).feeds, batch, model.inputs, dims)
    else:
        feed = synthetic_feed(model.inputs, batch, "uniform", seed=batch, dims=dims)
    timed = latency_wrapper(suite.timed_call(cell, engine, feed, path))  # --inject-slowdown self-test knob
    rounds = request.config.getoption("--latency-rounds")
    rounds = suite.config.latency.rounds if rounds is None else rounds  # checked >= 2 at start-up
    warmup = max(1, math.ceil(suite.config.latency.warmup_fraction * rounds))
    benchmark.group = f"{cell.model}-{shape.id}-{path}"
    benchmark.extra_info.update(model=cell.model, engine=cell.engine, precision=cell.precision,
                                batch_size=batch, shape=shape.id, dims=dims, device=suite.device,
                                path=f"latency-{path}", warmup_rounds=warmup, clock=timed.clock)
    if benchmark.disabled:  # --benchmark-disable: one call, no timing (pytest-benchmark's convention)
        benchmark.pedantic(timed, rounds=1, warmup_rounds=0, iterations=1)
        gate.smoke(cell, shape.id, path)
        return
    with suite.gpu_monitor(cell) as monitor:
        benchmark.pedantic(timed, rounds=rounds, warmup_rounds=warmup, iterations=1)
    samples = list(timed.samples_s[warmup:])
    record = {"model": cell.model, "engine": cell.engine, "precision": cell.precision, "cell": cell.id,
              "batch_size": batch, "shape": shape.id, "path": path, "device": suite.device, "samples_s": samples,
              "median_ms": statistics.median(samples) * 1e3, "gpu": monitor.summary()}
    record["bound"], record["bound_why"] = classify(record, suite.records)  # device- or host-bound, and why

    def remeasure():
        """The same case again, in this process (a busy attempt is not judged; see settle_latency)."""
        first, host = len(timed.samples_s), []
        for _ in range(warmup + rounds):
            start = time.perf_counter()
            timed()
            host.append(time.perf_counter() - start)
        _replace_benchmark_rounds(benchmark, host[warmup:])
        return timed.samples_s[first + warmup:]

    attempts = gate.settle_latency(record, remeasure)
    samples = record["samples_s"]
    summary = summarize_latency(samples, batch)
    bound = {"bound": record["bound"], "bound_why": record["bound_why"]}
    benchmark.extra_info.update(summary.as_dict(), samples_s=list(samples), gpu=record["gpu"], attempts=attempts,
                                **bound)
    suite.record("latency", cell, path=path, shape=shape.id, dims=dims, clock=timed.clock, samples_s=list(samples),
                 gpu=record["gpu"], attempts=attempts, **bound, **summary.as_dict())
    gate.check()  # --latency-baseline: fails a significant slowdown (suite/gate_plugin.py)


def _replace_benchmark_rounds(benchmark, host_seconds):
    """pytest-benchmark's own statistics describe the attempt the gate judges, not a busy one before it."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is not None:
        stats.data[:] = host_seconds
