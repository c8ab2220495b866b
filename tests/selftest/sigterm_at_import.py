"""A pytest plugin (``-p tests.selftest.sigterm_at_import``) that sends its own process SIGTERM while pytest is
still loading plugins, after the suite's package is imported: what a CI timeout does to a run in its first
seconds (tests/selftest/test_sigterm_early.py)."""

import os
import signal

import suite  # noqa: F401  (its import holds SIGTERM in a pytest process)

os.kill(os.getpid(), signal.SIGTERM)
