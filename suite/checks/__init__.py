"""What the user's checks (tests/accuracy|parity|latency) run beyond one call of a cell, one protocol per module
(docs/suite.md): ``latency_protocol`` a latency case's warm-up, rounds, record and checks, as pytest-benchmark's
fixture owns its rounds; ``kernel_profile`` the GPU kernels one inference of a latency case launches
(``--kernel-profile``); ``rebuild`` each engine built again from scratch and compared (``--rebuild-check``).

They import the run's timing (suite/timing.py) and the gate's case classes (suite/gate/bound.py), never the hooks; in
suite/, only the hooks' terminal summary imports one (rebuild's). This file imports nothing, so that importing one of
them imports none of the others.
"""
