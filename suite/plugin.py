"""The suite's pytest plugin: options, parametrization over cells, session fixtures, terminal summary.

Registered from the root ``conftest.py``. Tests stay thin: they ask for a ``cell`` (or
``latency_case``) and the ``suite`` session, and assert with metrics' verdicts.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from engines.base import CellUnavailable
from suite.cache import ArtifactCache, CacheEvent
from suite.config import ConfigError, ModelConfig, load_config
from suite.environment import fingerprint
from suite.session import Cell, SuiteSession
from suite.timing import PATHS

log = logging.getLogger("suite")

_ROOT = Path(__file__).resolve().parent.parent
_SESSION_KEY = pytest.StashKey[SuiteSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("inference-suite", "inference regression suite")
    group.addoption("--suite-config", default=str(_ROOT / "suite.toml"),
                    help="TOML file declaring models, engines, precisions, thresholds (default: suite.toml)")
    group.addoption("--models", default=None, help="comma-separated model names to run (default: all)")
    group.addoption("--engines", default=None,
                    help="comma-separated engines to run: torch, onnxruntime, inductor, tensorrt "
                         "(default: as configured)")
    group.addoption("--precisions", default=None,
                    help="comma-separated precisions: fp32, tf32, fp16, bf16, int8 (default: as configured)")
    group.addoption("--engine-cache", default=str(_ROOT / ".engine-cache"),
                    help="directory of the content-addressed engine/artifact cache (default: .engine-cache/)")
    group.addoption("--device", default="cpu", help="device to run engines on: cpu (default) or cuda:N")
    group.addoption("--latency-rounds", type=int, default=None,
                    help="timed rounds per latency case (default: [latency].rounds in the config)")
    group.addoption("--latency-batch-sizes", default=None,
                    help="comma-separated batch sizes for latency cases (default: each model's batch_sizes)")
    group.addoption("--latency-paths", default=None,
                    help="comma-separated latency paths: all (host copies included), model (device-resident), "
                         "graph (CUDA graph replay); default: all on cpu, all,model,graph on cuda")
    group.addoption("--overhead-model", default=None,
                    help="model for the GPU harness-overhead check (default: the first configured model)")
    group.addoption("--max-harness-overhead", type=float, default=0.02,
                    help="largest accepted harness overhead as a fraction of the bare loop (default 0.02)")
    group.addoption("--suite-results", default=None,
                    help="write accuracy/parity/latency records and engine facts of this run to this JSON "
                         "file at the end (and each record, as it is made, to FILE.partial.jsonl)")


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def pytest_configure(config: pytest.Config) -> None:
    for name, text in (
        ("accuracy", "top-1/top-5 on labelled data against thresholds and the PyTorch reference"),
        ("parity", "output agreement with the PyTorch reference on the same inputs"),
        ("latency", "pytest-benchmark latency/throughput cases (compare with --benchmark-compare)"),
        ("selftest", "tests of the suite's own machinery; CPU only, no engines"),
    ):
        config.addinivalue_line("markers", f"{name}: {text}")
    try:
        suite_config = load_config(config.getoption("--suite-config")).select(
            _split(config.getoption("--models")), _split(config.getoption("--engines")),
            _split(config.getoption("--precisions")))
    except ConfigError as exc:
        raise pytest.UsageError(f"suite config: {exc}") from exc
    device = config.getoption("--device")
    if device != "cpu" and not device.startswith("cuda"):
        raise pytest.UsageError(f"--device {device!r}: expected cpu or cuda:N")

    for noisy in ("onnxscript", "onnx_ir", "torch.onnx", "torch._dynamo", "torch.export"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    def on_event(event: CacheEvent) -> None:
        """Progress on long builds, live, whatever pytest's capture mode."""
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if event.action == "start":
            text = f"[engine cache] building {event.label} ..."
            if event.detail:
                text = f"[engine cache] corrupt entry ({event.detail}); rebuilding {event.label} ..."
        elif event.action in ("build", "rebuild-corrupt"):
            text = f"[engine cache] built {event.label} in {event.seconds:.1f} s"
        else:
            return
        log.info(text)
        if reporter is not None and config.getoption("verbose") >= 0:
            reporter.write_line(text)

    cache = ArtifactCache(config.getoption("--engine-cache"), on_event=on_event)
    session = SuiteSession(suite_config, cache, device)
    results = config.getoption("--suite-results")
    if results:
        session.stream_records_to(Path(f"{results}.partial.jsonl"))
    config.stash[_SESSION_KEY] = session


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Every saved benchmark carries the environment it was measured in."""
    machine_info["suite_environment"] = fingerprint(config.getoption("--device"))


def suite_session(config: pytest.Config) -> SuiteSession:
    return config.stash[_SESSION_KEY]


def _latency_batches(config: pytest.Config, model: ModelConfig) -> tuple[int, ...]:
    chosen = _split(config.getoption("--latency-batch-sizes"))
    if not chosen:
        return model.latency_batch_sizes
    sizes = tuple(int(b) for b in chosen)
    return tuple(b for b in sizes if min(model.batch_sizes) <= b <= max(model.batch_sizes))


def _judged(session: SuiteSession, cell: Cell) -> Any:
    """A cell listed under known_failures is a strict xfail: it shows with its reason in every run and
    report, and the day it passes (the engine was fixed) the run fails until the entry is removed."""
    reason = session.model(cell.model).known_failures.get(f"{cell.engine}-{cell.precision}")
    if reason is None:
        return cell
    return pytest.param(cell, marks=pytest.mark.xfail(strict=True, reason=f"known failure: {reason}"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    session = suite_session(metafunc.config)
    if "accuracy_cell" in metafunc.fixturenames:
        cells = session.cells(lambda m: m.accuracy_dataset is not None)
        metafunc.parametrize("accuracy_cell", [_judged(session, c) for c in cells], ids=[c.id for c in cells])
    if "cell" in metafunc.fixturenames:
        cells = [c for c in session.cells() if not c.is_reference]
        metafunc.parametrize("cell", [_judged(session, c) for c in cells], ids=[c.id for c in cells])
    if "latency_case" in metafunc.fixturenames:
        paths = _split(metafunc.config.getoption("--latency-paths"))
        if not paths:
            paths = ["all"] if session.device == "cpu" else list(PATHS)
        unknown = [p for p in paths if p not in PATHS]
        if unknown:
            raise pytest.UsageError(f"--latency-paths: unknown {unknown}; valid: {', '.join(PATHS)}")
        cases = [(c, b, p) for c in session.cells()
                 for b in _latency_batches(metafunc.config, session.model(c.model)) for p in paths]
        # Case names stay stable for baselines: CPU runs keep the historical "...-bsN" form.
        ids = [f"{c.id}-bs{b}" if p == "all" else f"{c.id}-bs{b}-{p}" for c, b, p in cases]
        metafunc.parametrize("latency_case", cases, ids=ids)


@pytest.fixture(scope="session")
def suite(request: pytest.FixtureRequest) -> SuiteSession:
    """The session: config, cache, datasets, engines and reference outputs, each built once."""
    return suite_session(request.config)


@pytest.fixture
def engine_for(suite: SuiteSession) -> Any:
    """``engine_for(cell)``: the loaded engine, or a skip that names why this cell cannot run here."""

    def get(cell: Cell) -> Any:
        try:
            return suite.engine(cell)
        except CellUnavailable as exc:
            pytest.skip(f"{cell.id}: {exc}")

    return get


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    """A cell or latency path that cannot run on this machine is a skip with its reason, wherever raised."""
    try:
        return (yield)
    except CellUnavailable as exc:
        pytest.skip(str(exc))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None:
        return
    tr = terminalreporter
    stats = session.cache.stats
    corrupt = stats.corrupt_rebuilds
    if corrupt:
        tr.section("engine cache: corrupt entries rebuilt", sep="-", yellow=True)
        for event in corrupt:
            tr.write_line(f"{event.label}: {event.detail}")
    loaded = session.loaded_cells()
    if loaded:
        tr.section("engines", sep="-")
        tr.write_line(f"{'cell':<44}{'size MB':>10}{'layers':>9}{'params':>12}")
        for cell, engine in sorted(loaded.items()):
            f = engine.facts
            size = f"{f.size_mb:.2f}" if f.size_mb is not None else "-"
            tr.write_line(f"{cell.id:<44}{size:>10}{f.layers or '-':>9}{f.parameters or '-':>12}")
    path = config.getoption("--suite-results")
    if path:
        Path(path).write_text(json.dumps({"environment": fingerprint(session.device),
                                          "records": session.records,
                                          "engines": {c.id: e.facts.as_dict() for c, e in loaded.items()}},
                                         indent=1, default=str))
        tr.write_line(f"suite results written to {path}")
    tr.write_line(stats.summary_line())
