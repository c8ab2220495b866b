"""The suite's pytest plugin and the modules it is made of (docs/architecture: report -> suite -> engines)."""

from suite.sigterm import hold_until_pytest_configures

hold_until_pytest_configures()  # first thing in a pytest process: the plugins' imports take seconds (suite/sigterm.py)
