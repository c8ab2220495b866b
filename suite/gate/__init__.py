"""The gates: latency against a pytest-benchmark baseline, accuracy/parity drift against a --suite-results
baseline, coverage of both, and the self-test knobs that prove they fire (docs/gating.md).

Tests opt in with one line at their end, ``gate.check()``: every record the test appended to the session is
compared with its baseline counterpart and the test fails with the numbers when a gate trips. Every comparison
reports into the run's verdict (suite/verdict.py) as a component of its test: a regression fails; unchanged and
improvement pass; busy, inconclusive and no-baseline are *not judged*, and a run with a not-judged case does not
exit 0 unless the user accepted that reason.

One module per concern, imports one way (plugin -> check, tables, benchmark_compare -> state -> latency, drift, coverage
-> bound, environment -> baselines; a contract in pyproject.toml): ``plugin`` the pytest hooks and fixtures only;
``check`` what a test calls (``gate.check()``); ``tables`` what the gate prints; ``benchmark_compare``
pytest-benchmark's own compare, judged on the case's report; ``state`` the Gate under ``config.stash[GATE_KEY]``;
``latency`` the latency gate and its busy rule; ``drift`` accuracy, parity and GPU memory drift; ``coverage`` which
cases a baseline covers; ``bound`` a latency case's class and its rule; ``environment`` whether a baseline comes from
another machine; ``baselines`` the baseline files read. Beside them, importing none of the gate:
``baseline_environment`` what differs from the baselines' environments, the verdict's opening block; ``census`` the
precision census's verdict; ``cpu_meter`` other processes' CPU share; ``inject`` the self-test knobs; ``wall_bound`` a
case's wall-time bound. This file imports nothing, so that importing one of them imports none of the others, the hooks
least of all.
"""
