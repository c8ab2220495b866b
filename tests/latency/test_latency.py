"""Latency and throughput per model, engine, precision and batch size, recorded by pytest-benchmark.

Compare against a saved baseline with ``pytest -m latency --benchmark-compare
--benchmark-compare-fail=mean:10%``; the case names are stable so baselines line up.
"""

import math

import pytest

from metrics import summarize_latency
from suite.inputs import synthetic_feed, tile_to_batch

pytestmark = pytest.mark.latency


def test_latency(latency_case, suite, engine_for, benchmark, request):
    cell, batch = latency_case
    model = suite.model(cell.model)
    runner = engine_for(cell).runner
    if model.parity_dataset:
        feed = tile_to_batch(suite.dataset(model.parity_dataset).feeds, batch)
    else:
        feed = synthetic_feed(model.inputs, batch, "uniform", seed=batch)
    rounds = request.config.getoption("--latency-rounds") or suite.config.latency.rounds
    warmup = max(1, math.ceil(suite.config.latency.warmup_fraction * rounds))
    benchmark.group = f"{cell.model}-bs{batch}"
    benchmark.extra_info.update(model=cell.model, engine=cell.engine, precision=cell.precision,
                                batch_size=batch, device=suite.device, path="latency-all",
                                warmup_rounds=warmup)
    benchmark.pedantic(runner.infer, args=(feed,), rounds=rounds, warmup_rounds=warmup, iterations=1)
    summary = summarize_latency(benchmark.stats.stats.data, batch)
    benchmark.extra_info.update(summary.as_dict())
