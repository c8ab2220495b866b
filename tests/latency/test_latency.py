"""Latency and throughput per model, engine, precision, batch size and path, recorded by pytest-benchmark.

Paths: ``all`` is host arrays in and out (host<->device copies included, what an application sees);
``model`` keeps inputs and outputs resident on the device (engine time alone); ``graph`` replays a
captured CUDA graph where the engine allows it. On CPU only ``all`` exists.

Every case also checks what its timed calls returned (issue 23, issue 43): the outputs of the first timed round, of the
last call and of a random sample of the rounds between them (MLPerf's TEST01) are compared with the fp32 reference's for
the feed each ran (suite/checks/latency_protocol.py ``check_timed_outputs``). The rounds cycle through a few distinct
feeds (MLPerf's TEST04), so an engine that answers a repeated input from what it returned before (a result cache, a
replay that did not launch) is timed computing, or shows another feed's outputs. A replay or an IO binding reuses static
buffers, where a stale output passes every timing; the device paths read their bound outputs (``path_outputs``) and take
the next feed into their bound inputs outside the timed region. A case far faster than its baseline is timed again, each
round on a feed of its own and every round's outputs checked, before the gate believes it (suite/gate/latency.py
``unproven_speedup``).

The suite's gate is ``--latency-baseline`` (docs/gating.md); the case names are stable so baselines
line up. A case measured while other processes used the CPUs is re-measured (suite/gate/check.py).
``--benchmark-disable`` runs each case once as a smoke test, as pytest-benchmark users expect.
"""

import pytest

from suite.checks.latency_protocol import LatencyProtocol
from suite.options import options_of

pytestmark = pytest.mark.latency


def test_latency(latency_case, suite, engine_for, benchmark, request, latency_wrapper, gate):
    """The case stated; its warm-up, rounds, re-measures, checks and record are the protocol's
    (suite/checks/latency_protocol.py), as pytest-benchmark's fixture owns its rounds."""
    cell, shape, path = latency_case
    engine = engine_for(cell)
    LatencyProtocol(suite, cell, shape, path, engine, benchmark, options_of(request.config), latency_wrapper,
                    gate).run()
