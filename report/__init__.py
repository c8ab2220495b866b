"""The HTML report: the suite's tables and plots rendered into pytest-html's single file (docs/gating.md)."""
