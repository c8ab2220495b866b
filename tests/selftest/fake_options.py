"""The options of a fake pytest config, for the self-tests that call the suite's functions directly.

Why: the suite reads its options from one SuiteOptions per run (suite/options.py), never from ``config.getoption``;
a fake config holds one under OPTIONS_KEY, its fields the options' defaults unless given.
"""

from __future__ import annotations

from typing import Any

from suite.options import OPTIONS_KEY, SuiteOptions


def options_stash(**fields: Any) -> dict[Any, Any]:
    """A fake config's stash holding the run's options: ``SuiteOptions(**fields)`` under OPTIONS_KEY."""
    return {OPTIONS_KEY: SuiteOptions(**fields)}
