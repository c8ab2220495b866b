"""Latency and throughput per model, engine, precision, batch size and path, recorded by pytest-benchmark.

Paths: ``all`` is host arrays in and out (host<->device copies included, what an application sees);
``model`` keeps inputs and outputs resident on the device (engine time alone); ``graph`` replays a
captured CUDA graph where the engine allows it. On CPU only ``all`` exists.

Compare against a saved baseline with ``pytest -m latency --benchmark-compare
--benchmark-compare-fail=mean:10%``; the case names are stable so baselines line up.
"""

import math

import pytest

from metrics import summarize_latency
from suite.inputs import synthetic_feed, tile_to_batch

pytestmark = pytest.mark.latency


def test_latency(latency_case, suite, engine_for, benchmark, request, latency_wrapper, gate):
    cell, batch, path = latency_case
    model = suite.model(cell.model)
    engine = engine_for(cell)
    if model.parity_dataset:
        feed = tile_to_batch(suite.dataset(model.parity_dataset).feeds, batch)
    else:
        feed = synthetic_feed(model.inputs, batch, "uniform", seed=batch)
    timed = latency_wrapper(suite.timed_call(cell, engine, feed, path))  # --inject-slowdown self-test knob
    rounds = request.config.getoption("--latency-rounds") or suite.config.latency.rounds
    warmup = max(1, math.ceil(suite.config.latency.warmup_fraction * rounds))
    benchmark.group = f"{cell.model}-bs{batch}-{path}"
    benchmark.extra_info.update(model=cell.model, engine=cell.engine, precision=cell.precision,
                                batch_size=batch, device=suite.device, path=f"latency-{path}",
                                warmup_rounds=warmup, clock=timed.clock)
    with suite.gpu_monitor(cell) as monitor:
        benchmark.pedantic(timed, rounds=rounds, warmup_rounds=warmup, iterations=1)
    samples = timed.samples_s[warmup:]
    summary = summarize_latency(samples, batch)
    benchmark.extra_info.update(summary.as_dict(), samples_s=list(samples), gpu=monitor.summary())
    suite.record("latency", cell, path=path, clock=timed.clock, samples_s=list(samples), gpu=monitor.summary(),
                 **summary.as_dict())
    gate.check()  # --latency-baseline: fails a significant slowdown (suite/gate_plugin.py)
