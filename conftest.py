"""Root conftest: loads the suite's pytest plugins (options, cells, session fixtures, summary; baseline gates;
the HTML report's sections)."""

pytest_plugins = ["suite.plugin", "suite.gate_plugin", "report.plugin"]
