"""Root conftest: loads the suite's pytest plugin (options, cells, session fixtures, summary)."""

pytest_plugins = ["suite.plugin"]
