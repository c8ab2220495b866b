"""Harness overhead: the suite's latency-model loop against a bare CUDA-event loop around the same call.

Gated: the suite's reported latency-model median (its per-round CUDA-event samples, taken through
pytest-benchmark's loop and the suite's TimedCall) against a bare event loop's median. Reported too:
pytest-benchmark's own host time per round, which adds the Python around each call; at small,
launch-bound batches that host time is what --benchmark-compare sees.
"""

import statistics

import pytest
import torch

from suite.inputs import synthetic_feed
from suite.session import Cell

pytestmark = pytest.mark.latency

ROUNDS, WARMUP = 200, 20


def _bare_event_loop(runner, rounds, warmup):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    with torch.inference_mode():
        for _ in range(rounds + warmup):
            start.record()
            runner.module(*runner._static)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    return times[warmup:]


@pytest.mark.parametrize("batch", [8, 32])
def test_harness_overhead(suite, benchmark, batch, request):
    if not suite.device.startswith("cuda"):
        pytest.skip("the harness-overhead check compares CUDA-event loops; run with --device cuda:N")
    name = request.config.getoption("--overhead-model") or next(iter(suite.config.models))
    model = suite.model(name)
    precision = "fp16" if "fp16" in model.precisions else "fp32"
    cell = Cell(name, "torch", precision)
    engine = suite.engine(cell)
    feed = synthetic_feed(model.inputs, batch, "uniform", seed=batch)
    timed = suite.timed_call(cell, engine, feed, "model")
    benchmark.group = "harness-overhead"
    benchmark.pedantic(timed, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    suite_median = statistics.median(timed.samples_s[WARMUP:])
    host_median = statistics.median(benchmark.stats.stats.data)
    bare_median = statistics.median(_bare_event_loop(engine.runner, ROUNDS, WARMUP))
    overhead = suite_median / bare_median - 1
    limit = request.config.getoption("--max-harness-overhead")
    figures = dict(suite_median_ms=suite_median * 1e3, bare_median_ms=bare_median * 1e3,
                   overhead_pct=overhead * 100, host_round_median_ms=host_median * 1e3,
                   host_overhead_pct=(host_median / bare_median - 1) * 100, batch_size=batch,
                   limit_pct=limit * 100)
    benchmark.extra_info.update(cell=cell.id, **figures)
    suite.record("harness_overhead", cell, **figures)
    assert overhead <= limit, (f"{cell.id} bs{batch}: suite latency-model median {suite_median * 1e3:.4f} ms is "
                               f"{overhead:.2%} above the bare CUDA-event loop's {bare_median * 1e3:.4f} ms "
                               f"(limit {limit:.0%})")
