"""A latency case's protocol, owned by one object as pytest-benchmark's BenchmarkFixture owns calibration, warm-up and
rounds (issue 45): tests/latency/test_latency.py states the case and calls ``LatencyProtocol.run``; the self-tests
drive it without a child pytest run (tests/selftest/test_latency_protocol.py).

What ``run`` does, in this order: the reference's and the cell's own outputs for the case's feeds (``Expected``), the
warm-up and rounds through ``benchmark.pedantic`` (suite.timing.TimedCall times the rounds and the host reference
before each), the record with its class (suite/gate/bound.py), the gate's re-measures of a busy case and its proof of an
implausible speed-up (suite/gate/check.py), the summaries in ``extra_info``, the timed outputs checked against the
reference (``check_timed_outputs``), the node and kernel profiles, the record kept and the gate's check.
"""

import math
import statistics
import time

import pytest

from core.inputs import synthetic_feed, tile_to_batch
from metrics import summarize_latency
from suite.checks import kernel_profile
from suite.gate.bound import classify
from suite.timing import FEED_POOL


class LatencyProtocol:
    """One latency case (a cell, a shape, a path) timed, judged and recorded. ``engine`` is the cell's built engine,
    ``benchmark`` pytest-benchmark's fixture, ``options`` the run's SuiteOptions, ``wrap`` the gate's
    ``latency_wrapper`` (--inject-slowdown, the CPU meter) and ``gate`` its ``GateCheck``."""

    def __init__(self, suite, cell, shape, path, engine, benchmark, options, wrap, gate):
        self.suite, self.cell, self.shape, self.path, self.engine = suite, cell, shape, path, engine
        self.benchmark, self.options, self.wrap, self.gate = benchmark, options, wrap, gate

    def run(self):
        suite, cell, shape, path, engine, benchmark = (self.suite, self.cell, self.shape, self.path, self.engine,
                                                       self.benchmark)
        batch, dims = shape.batch, shape.dims_dict()
        model = suite.model(cell.model)
        feed_of = _feeds(suite, model, batch, dims)
        expected = Expected(suite, cell, feed_of)  # before any timed call: the reference's, and the engine's own
        call = suite.timed_call(cell, engine, feed_of(0), path, vary=feed_of)
        timed = self.wrap(call)  # --inject-slowdown self-test knob
        given = self.options
        rounds = given.latency_rounds
        rounds = suite.config.latency.rounds if rounds is None else rounds  # checked >= 2 at start-up
        warmup = max(1, math.ceil(suite.config.latency.warmup_fraction * rounds))
        call.first_timed_round = warmup
        benchmark.group = f"{cell.model}-{shape.id}-{path}"
        benchmark.extra_info.update(model=cell.model, engine=cell.engine, precision=cell.precision,
                                    batch_size=batch, shape=shape.id, dims=dims, device=suite.device,
                                    path=f"latency-{path}", warmup_rounds=warmup, clock=timed.clock)
        if benchmark.disabled:  # --benchmark-disable: one call, no timing (pytest-benchmark's convention)
            call.first_timed_round = 0
            benchmark.pedantic(timed, setup=call.setup, rounds=1, warmup_rounds=0, iterations=1)
            check_timed_outputs(cell, shape.id, path, call, expected, suite.model(cell.model))
            self.gate.smoke(cell, shape.id, path)
            return
        with suite.gpu_monitor(cell) as monitor:
            benchmark.pedantic(timed, setup=call.setup, rounds=rounds, warmup_rounds=warmup, iterations=1)
        samples = list(timed.samples_s[warmup:])
        record = {"model": cell.model, "engine": cell.engine, "precision": cell.precision, "cell": cell.id,
                  "batch_size": batch, "shape": shape.id, "path": path, "device": suite.device, "clock": timed.clock,
                  "samples_s": samples, "median_ms": statistics.median(samples) * 1e3, "gpu": monitor.summary(),
                  "host_ref_s": call.host_refs(warmup, len(samples))}  # the host's speed beside each round
        record["bound"], record["bound_why"] = classify(record, suite.records)  # device- or host-bound, and why

        def remeasure(deadline=None, every_round=False):
            """The same case again, in this process (a busy attempt is not judged; see settle_latency), its timed
            rounds audited afresh: a random sample of them, or every one. None where the ``perf_counter`` deadline (the
            case's bound) passed before its last round: the benchmark keeps the attempt before."""
            # Index the call's own samples for the audit but return the timed callable's: under --inject-slowdown
            # those carry the injected wait, and a busy case's second attempt must be the same slowed engine.
            first, host = len(call.samples_s), []
            call.audit_from(first + warmup, every_round)
            for _ in range(warmup + rounds):
                if deadline is not None and time.perf_counter() > deadline:
                    return None
                call.setup()  # the audit's copy and the next feed, outside the host time too
                start = time.perf_counter()
                timed()
                host.append(time.perf_counter() - start)
            _replace_benchmark_rounds(benchmark, host[warmup:])
            record["host_ref_s"] = call.host_refs(first + warmup, rounds)  # the rounds the record's samples become
            return timed.samples_s[first + warmup:]

        def prove():
            """The case again with every round on a feed no other call ran and every timed round's outputs kept: what
            an implausible speed-up must pass before the gate believes it (suite/gate/check.py prove_speedup)."""
            call.fresh_feeds()
            return remeasure(None, every_round=True)

        attempts = self.gate.settle_latency(record, remeasure)
        self.gate.prove_speedup(record, attempts, prove)
        samples = record["samples_s"]
        summary = summarize_latency(samples, batch)
        bound = {"bound": record["bound"], "bound_why": record["bound_why"]}
        benchmark.extra_info.update(summary.as_dict(), samples_s=list(samples), gpu=record["gpu"], attempts=attempts,
                                    host_ref_s=record["host_ref_s"], **bound)
        checked = check_timed_outputs(cell, shape.id, path, call, expected, model)
        audit = call.audit_summary(len(samples))
        nodes = _node_profile(given.node_profile, engine, feed_of(0), path)
        if nodes:
            benchmark.extra_info["node_times_us"] = nodes
        kernels = None
        if kernel_profile.wanted(given.kernel_profile, suite.device):
            kernels = kernel_profile.profile_kernels(call, given.kernel_profile, suite.device)
            benchmark.extra_info["kernels"] = kernels
        suite.record("latency", cell, path=path, shape=shape.id, dims=dims, clock=timed.clock,
                     samples_s=list(samples), host_ref_s=record["host_ref_s"], gpu=record["gpu"], attempts=attempts,
                     outputs_checked=checked, outputs_audited=audit, **bound, **summary.as_dict(),
                     **({"node_times_us": nodes} if nodes else {}),
                     **({"kernels": kernels} if kernels is not None else {}), **_set_up(call))
        self.gate.check()  # --latency-baseline: fails a significant slowdown (suite/gate/)


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


def _feeds(suite, model, batch, dims):
    """Feed id -> one of the case's feeds, made when asked: 0 is the case's feed as before (real rows from the first,
    or uniform inputs of seed ``batch``); another id, real rows from another row on, or another seed. The timed
    rounds cycle through the first FEED_POOL (suite.timing.TimedCall); a case proving a speed-up runs one per round."""
    if model.parity_dataset:
        data = suite.dataset(model.parity_dataset).feeds
        return lambda i: tile_to_batch(data, batch, model.inputs, dims, first=i * (batch + 1))
    return lambda i: synthetic_feed(model.inputs, batch, "uniform", seed=batch + 7919 * i, dims=dims)


class Expected:
    """What every timed call must return, per feed id: the fp32 reference's outputs (``reference(i)``) and the cell's
    own untimed outputs (``own(i)``), each run on its own copy of the feed. The pool's are made here, before any timed
    call; a proof's own feeds when the check asks for them."""

    def __init__(self, suite, cell, feed_of, pool=FEED_POOL):
        self._suite, self._cell, self._feed_of = suite, cell, feed_of
        self._made = {}
        for i in range(pool):
            self.reference(i)
            self.own(i)

    def _run(self, cell, i):
        if (cell, i) not in self._made:
            feed = self._feed_of(i)
            self._made[cell, i] = self._suite.run_batched(cell, {k: v.copy() for k, v in feed.items()})
        return self._made[cell, i]

    def reference(self, i):
        return self._run(self._suite.reference_cell(self._cell.model), i)

    def own(self, i):
        return self._run(self._cell, i)


def check_timed_outputs(cell, shape_id, path, call, expected, model):
    """The outputs of the first timed call, of the last call and of the audit's random sample of the timed rounds
    between them are compared with the reference's for the feed each ran (issue 23: a CUDA-graph replay or an IO
    binding reuses static buffers, where a stale output is a known failure mode; issue 43: an engine wrong in every
    round between the first and the last passed; MLPerf's audit TEST01 exists for both), with the cell's parity
    tolerance. ``expected`` gives, per feed id, the reference's outputs and the engine's own untimed ones
    (``Expected``). A failure fails the case, and says whether the engine's own untimed run on the same feed was right
    (then the timed path returned something else) or wrong too; of the sampled rounds, the first wrong one is said,
    with how many more were. Only the cell's declared known failure (``known_failures``, covering parity, its
    ``match`` found in the failure) is not counted here: it is parity's to judge. Returns what was checked, for the
    record."""
    from metrics import compare_outputs

    tolerance = model.tolerance(cell.precision)
    known = model.known_failures.get(f"{cell.engine}-{cell.precision}")
    case = f"{cell.id}-{shape_id}-{path}"
    first, last = call.first_timed_round, len(call.samples_s) - 1
    sampled = {i: kept for i, kept in call.audited().items() if i not in (first, last)}
    calls = [("first timed call", first, call.feed_ids[first], call.first_outputs)]
    calls += [("audited round", i, feed, outputs) for i, (feed, outputs) in sampled.items()]
    calls.append(("last call", last, call.feed_ids[last], call.last_outputs()))
    checked, failures, wrong_rounds = {}, [], []
    for which, index, feed, outputs in calls:
        where = f"round {index + 1}" + (f", feed {feed}" if call.pool > 1 else "")
        assert outputs is not None, f"{case}: the {which} ({where}) kept no outputs; nothing to check"
        bad = [r.explain() for r in compare_outputs(expected.reference(feed), outputs, tolerance).values()
               if not r.passed]
        message = "; ".join(bad)
        if bad and known is not None and known.covers("parity", message):
            checked.setdefault(which, f"{where}: the cell's known failure ({known.reason}): {message}")
            continue
        if not bad:
            if which != "audited round":
                checked[which] = f"{where}: agrees with the reference"
            continue
        if which == "audited round" and wrong_rounds:
            wrong_rounds.append(index)
            continue
        wrong_rounds += [index] if which == "audited round" else []
        own_right = all(r.passed for r in compare_outputs(expected.reference(feed), expected.own(feed),
                                                          tolerance).values())
        own_said = ("the engine's own untimed run on this feed agrees with the reference, so the timed path returned "
                    "something else (a stale or unwritten output buffer?)" if own_right else
                    "the engine's own untimed run on this feed differs from the reference too")
        failures.append(f"{case}: the {which} ({where}) returned outputs that differ from the reference's for this "
                        f"feed; {own_said}: {message}")
    if sampled:
        checked["audited rounds"] = (f"{len(sampled)} of the timed rounds between the first and the last, drawn at "
                                     f"random after the run: {len(sampled) - len(wrong_rounds)} agree with the "
                                     "reference")
    if len(wrong_rounds) > 1:
        more = len(wrong_rounds) - 1
        failures.append(f"{case}: {more} more of the {len(sampled)} audited rounds "
                        f"{'differs' if more == 1 else 'differ'} too (round{'' if more == 1 else 's'} "
                        f"{', '.join(str(i + 1) for i in wrong_rounds[1:9])}{' ...' if more > 8 else ''})")
    if failures:  # the message says it all: no traceback through the test's source (a long report buries it)
        pytest.fail("\n".join(failures), pytrace=False)
    return checked


def _replace_benchmark_rounds(benchmark, host_seconds):
    """pytest-benchmark's own statistics describe the attempt the gate judges, not a busy one before it."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is not None:
        stats.data[:] = host_seconds
