"""One typed options object (issue 45): the suite reads each command-line option once per process, into
suite/options.py's SuiteOptions, and every other module reads its fields. Why: ``--device`` was read raw in several
modules and normalised (``cuda`` -> ``cuda:0``) in one, so fingerprints carried both forms. The rule is a pure
function of the source files (path -> text), checked here on this checkout and on made-up trees that break it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from suite import device, options
from suite.options import SuiteOptions, read_options

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
#: The code that runs in a suite's run: every module of these reads options through SuiteOptions.
SCANNED = ("suite", "report", "engines", "tests/latency", "tests/parity", "tests/accuracy", "conftest.py")
#: The one module that calls ``config.getoption``.
OPTIONS_MODULE = "suite/options.py"
_GETOPTION = re.compile(r"\bgetoption\b")


def sources(root: Path = ROOT) -> dict[str, str]:
    """The scanned Python files of the checkout, by path from its root."""
    files: dict[str, str] = {}
    for name in SCANNED:
        paths = [root / name] if name.endswith(".py") else sorted((root / name).rglob("*.py"))
        files.update({p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in paths})
    return files


def getoption_calls(files: dict[str, str]) -> list[str]:
    """``path:line: code`` for each ``getoption`` outside the options module."""
    return [f"{path}:{n}: {line.strip()}" for path, text in sorted(files.items()) if path != OPTIONS_MODULE
            and path.startswith(SCANNED) for n, line in enumerate(text.splitlines(), 1) if _GETOPTION.search(line)]


def test_only_the_options_module_reads_an_option() -> None:
    found = sources()
    assert OPTIONS_MODULE in found and "suite/gate/state.py" in found and "tests/latency/test_latency.py" in found
    hits = getoption_calls(found)
    assert not hits, "read the option from suite.options.options_of(config) instead:\n" + "\n".join(hits)


def test_a_getoption_outside_the_options_module_is_named() -> None:
    tree = {OPTIONS_MODULE: 'x = config.getoption("--device")\n',
            "suite/fleet.py": 'import os\n    n = config.getoption("numprocesses", None)\n',
            "tests/parity/test_parity.py": 'if request.config.getoption("--localize"):\n',
            "tests/selftest/test_fake.py": 'SimpleNamespace(getoption=lambda name: None)\n',  # not scanned
            "tools/plan.py": 'config.getoption("--plan")\n'}  # not scanned: the commands read their own arguments
    assert getoption_calls(tree) == ['suite/fleet.py:2: n = config.getoption("numprocesses", None)',
                                     'tests/parity/test_parity.py:1: if request.config.getoption("--localize"):']


def _read(monkeypatch: pytest.MonkeyPatch, bound_gpu: str | None = None, **given: Any) -> SuiteOptions:
    """read_options over a command line of the options' defaults, with ``given`` (dest or flag names) set."""
    values = {**{f"--{f.name.replace('_', '-')}": f.default for f in dataclasses.fields(SuiteOptions)},
              "--device": "cpu", "verbose": 0, **given}
    monkeypatch.setattr(device, "BOUND_GPU", bound_gpu)
    return read_options(SimpleNamespace(getoption=lambda name, default=None: values.get(name, default)))  # type: ignore[arg-type]


@pytest.mark.parametrize(("device", "bound_gpu", "canonical"), [
    ("cpu", None, "cpu"), ("cuda:1", None, "cuda:1"), ("cuda", None, "cuda:0"),
    ("cuda", "3", "cuda:0"),  # an xdist worker of a --device cuda run: its own GPU is its cuda:0
], ids=["cpu", "cuda:1", "cuda", "worker"])
def test_the_device_has_one_form_and_keeps_the_one_asked_for(monkeypatch, device, bound_gpu, canonical) -> None:
    read = _read(monkeypatch, bound_gpu, **{"--device": device})
    assert (read.device, read.device_requested) == (canonical, device)


def test_pytest_benchmarks_cwd_storage_is_the_projects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in the project's .benchmarks whatever the cwd, by the gate as by pytest-benchmark
    (suite/hooks/configure.py)."""
    cwd_default = _read(monkeypatch, benchmark_storage="file://./.benchmarks")
    assert cwd_default.benchmark_storage == f"file://{ROOT / '.benchmarks'}"
    assert _read(monkeypatch, benchmark_storage="file:///x").benchmark_storage == "file:///x"


def test_the_defaults_are_the_options_own(request: pytest.FixtureRequest) -> None:
    """A fake config's options (tests/selftest/fake_options.py) start from SuiteOptions' defaults: they are the ones
    the suite's and the gate's options declare, read here from this run's own command line, which names none."""
    if not request.config.pluginmanager.has_plugin("suite.plugin"):
        pytest.skip("the suite's plugins are off (tools/mutation.sh): no option of theirs to read")
    read, default = options.options_of(request.config), SuiteOptions()
    ours = [f.name for f in dataclasses.fields(SuiteOptions)]
    ours = ours[:ours.index("benchmark_compare")]  # the fields after it are other plugins'
    assert {n: getattr(read, n) for n in ours} == {n: getattr(default, n) for n in ours}
