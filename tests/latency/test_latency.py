"""Latency and throughput per model, engine, precision, batch size and path, recorded by pytest-benchmark.

Paths: ``all`` is host arrays in and out (host<->device copies included, what an application sees);
``model`` keeps inputs and outputs resident on the device (engine time alone); ``graph`` replays a
captured CUDA graph where the engine allows it. On CPU only ``all`` exists.

Every case also checks what its timed calls returned (issue 23): the outputs of the first timed round and of the last
call are compared with the fp32 reference's for the same feed (``check_timed_outputs``). A replay or an IO binding
reuses static buffers, where a stale output passes every timing; the device paths read their bound outputs
(``path_outputs``) outside the timed region.

The suite's gate is ``--latency-baseline`` (docs/gating.md); the case names are stable so baselines
line up. A case measured while other processes used the CPUs is re-measured (suite/gate/check.py).
``--benchmark-disable`` runs each case once as a smoke test, as pytest-benchmark users expect.
"""

import math
import statistics
import time

import pytest

from core.inputs import synthetic_feed, tile_to_batch
from metrics import summarize_latency
from suite import kernel_profile
from suite.bound import classify

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
    expected = _untimed_outputs(suite, cell, feed)  # before any timed call: the reference's, and the engine's own
    call = suite.timed_call(cell, engine, feed, path)
    timed = latency_wrapper(call)  # --inject-slowdown self-test knob
    rounds = request.config.getoption("--latency-rounds")
    rounds = suite.config.latency.rounds if rounds is None else rounds  # checked >= 2 at start-up
    warmup = max(1, math.ceil(suite.config.latency.warmup_fraction * rounds))
    call.first_timed_round = warmup
    benchmark.group = f"{cell.model}-{shape.id}-{path}"
    benchmark.extra_info.update(model=cell.model, engine=cell.engine, precision=cell.precision,
                                batch_size=batch, shape=shape.id, dims=dims, device=suite.device,
                                path=f"latency-{path}", warmup_rounds=warmup, clock=timed.clock)
    if benchmark.disabled:  # --benchmark-disable: one call, no timing (pytest-benchmark's convention)
        call.first_timed_round = 0
        benchmark.pedantic(timed, rounds=1, warmup_rounds=0, iterations=1)
        check_timed_outputs(cell, shape.id, path, call, *expected, suite.model(cell.model))
        gate.smoke(cell, shape.id, path)
        return
    with suite.gpu_monitor(cell) as monitor:
        benchmark.pedantic(timed, rounds=rounds, warmup_rounds=warmup, iterations=1)
    samples = list(timed.samples_s[warmup:])
    record = {"model": cell.model, "engine": cell.engine, "precision": cell.precision, "cell": cell.id,
              "batch_size": batch, "shape": shape.id, "path": path, "device": suite.device, "clock": timed.clock,
              "samples_s": samples, "median_ms": statistics.median(samples) * 1e3, "gpu": monitor.summary()}
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
    checked = check_timed_outputs(cell, shape.id, path, call, *expected, model)
    nodes = _node_profile(request.config.getoption("--node-profile"), engine, feed, path)
    if nodes:
        benchmark.extra_info["node_times_us"] = nodes
    kernels = None
    if kernel_profile.wanted(request.config.getoption("--kernel-profile"), suite.device):
        kernels = kernel_profile.profile_kernels(call, request.config.getoption("--kernel-profile"), suite.device)
        benchmark.extra_info["kernels"] = kernels
    suite.record("latency", cell, path=path, shape=shape.id, dims=dims, clock=timed.clock, samples_s=list(samples),
                 gpu=record["gpu"], attempts=attempts, outputs_checked=checked, **bound, **summary.as_dict(),
                 **({"node_times_us": nodes} if nodes else {}), **({"kernels": kernels} if kernels is not None else {}),
                 **_set_up(call))
    gate.check()  # --latency-baseline: fails a significant slowdown (suite/gate/)


def _set_up(call):
    """The device path's set-up seconds, outside every round (suite.timing.TimedCall), and its launch cover where it
    has one, for the record; nothing on the ``all`` path."""
    if call.prepare_s is None:
        return {}
    parts = {k: round(v, 4) for k, v in call.prepare_parts.items()}
    cover = call.launch_cover_summary()  # a graph replay queued behind a spin (engines/launch_cover.py)
    return {"prepare_s": round(call.prepare_s, 4), **({"prepare_parts": parts} if parts else {}),
            **({"launch_cover": cover} if cover else {})}


def _node_profile(runs, engine, feed, path):
    """--node-profile RUNS: each node's median time for this case's feed (ONNX Runtime cells, path all; the device
    paths run the same nodes), profiled after the timing in a session of its own. None where not asked for."""
    profile = getattr(engine.runner, "node_profile", None)
    if not runs or profile is None or path != "all":
        return None
    return profile(feed, runs)


def _untimed_outputs(suite, cell, feed):
    """(the fp32 reference's outputs, the cell's own untimed outputs) for the latency feed, each run on its own
    copy of it: what every timed call of the case must return."""
    reference = suite.run_batched(suite.reference_cell(cell.model), {k: v.copy() for k, v in feed.items()})
    own = suite.run_batched(cell, {k: v.copy() for k, v in feed.items()})
    return reference, own


def check_timed_outputs(cell, shape_id, path, call, reference, own, model):
    """The outputs of the first timed call and of the last call are compared with the reference for this batch
    (issue 23: a CUDA-graph replay or an IO binding reuses static buffers, where a stale output is a known failure
    mode; MLPerf's audit TEST01 exists for it), with the cell's parity tolerance. A failure fails the case, and says
    whether the engine's own untimed run on the same feed was right (then the timed path returned something else)
    or wrong too. Only the cell's declared known failure (``known_failures``, covering parity, its ``match`` found
    in the failure) is not counted here: it is parity's to judge. Returns what was checked, for the record."""
    from metrics import compare_outputs

    tolerance = model.tolerance(cell.precision)
    known = model.known_failures.get(f"{cell.engine}-{cell.precision}")
    case = f"{cell.id}-{shape_id}-{path}"
    calls = (("first timed call", f"round {call.first_timed_round + 1}", call.first_outputs),
             ("last call", f"round {len(call.samples_s)}", call.last_outputs()))
    own_right = all(r.passed for r in compare_outputs(reference, own, tolerance).values())
    checked, failures = {}, []
    for which, where, outputs in calls:
        assert outputs is not None, f"{case}: the {which} ({where}) kept no outputs; nothing to check"
        bad = [r.explain() for r in compare_outputs(reference, outputs, tolerance).values() if not r.passed]
        if not bad:
            checked[which] = f"{where}: agrees with the reference"
            continue
        message = "; ".join(bad)
        if known is not None and known.covers("parity", message):
            checked[which] = f"{where}: the cell's known failure ({known.reason}): {message}"
            continue
        own_said = ("the engine's own untimed run on this feed agrees with the reference, so the timed path returned "
                    "something else (a stale or unwritten output buffer?)" if own_right else
                    "the engine's own untimed run on this feed differs from the reference too")
        failures.append(f"{case}: the {which} ({where}) returned outputs that differ from the reference's for this "
                        f"feed; {own_said}: {message}")
    if failures:  # the message says it all: no traceback through the test's source (a long report buries it)
        pytest.fail("\n".join(failures), pytrace=False)
    return checked


def _replace_benchmark_rounds(benchmark, host_seconds):
    """pytest-benchmark's own statistics describe the attempt the gate judges, not a busy one before it."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is not None:
        stats.data[:] = host_seconds
