"""Root conftest: where the project is not installed (a bare checkout, the GPU box), registers the suite's
pytest plugins (options, cells, session fixtures, the verdict; baseline gates; the HTML report's sections).
Where it is installed (setup.sh), pyproject.toml's pytest11 entry points have registered them already under
these names, and pytest skips them here; then the options also parse in their space form from any directory."""

pytest_plugins = ["suite.plugin", "suite.gate.plugin", "suite.shard_plugin", "report.plugin"]
