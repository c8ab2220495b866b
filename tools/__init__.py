"""The measuring and reading tools, above every other layer: each module is a command (pyproject's
[project.scripts] names them ``suite-...``), also runnable from a checkout as ``python tools/NAME.py``."""
