"""The HTML report: the suite's tables and plots rendered into pytest-html's single file (docs/gating.md)."""

import suite  # noqa: F401  (first: holds a SIGTERM that comes while the plugins import; suite/sigterm.py)
