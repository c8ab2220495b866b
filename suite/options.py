"""The suite's command-line options: declared once, read once into one SuiteOptions per process (the only module that
calls ``config.getoption``), and checked at start-up where a wrong value would otherwise fail every test or silently
do nothing (one usage error each)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metrics.drift import DriftTolerances
from suite import device, verdict
from suite.config import SuiteConfig
from suite.state import RUN_KEY
from suite.timing import PATHS

_ROOT = Path(__file__).resolve().parent.parent

#: pytest-benchmark's default storage, relative to the cwd: read as the project's, whatever the cwd.
_CWD_STORAGE = "file://./.benchmarks"


@dataclass(frozen=True)
class SuiteOptions:
    """Every command-line value the suite reads, its own and other plugins', read once per process: no module reads
    an option raw, and none sees another form of a value (``--device cuda`` was ``cuda`` in some fingerprints and
    ``cuda:0`` in others). The defaults are the options' own; values are as parsed, checked in pytest_configure."""

    suite_config: str = str(_ROOT / "suite.toml")
    models: str | None = None
    engines: str | None = None
    precisions: str | None = None
    engine_cache: str = str(_ROOT / ".engine-cache")
    #: --device as written: ``cuda`` asks for every visible GPU (one xdist worker each); start-up checks read this
    device_requested: str = "cpu"
    #: the device the run uses and every fingerprint records, in its one form: ``cuda`` (or an xdist worker's own GPU)
    #: is ``cuda:0``
    device: str = "cpu"
    latency_rounds: int | None = None
    latency_batch_sizes: str | None = None
    node_profile: int = 0
    kernel_profile: int = 0
    latency_paths: str | None = None
    overhead_model: str | None = None
    max_harness_overhead: float = 0.02
    suite_results: str | None = None
    rebuild_check: int = 0
    localize: bool = False
    accept_not_judged: str | None = None
    # suite/shard_plugin.py's
    plan: str | None = None
    shard: str | None = None
    # the gate's (suite/gate/plugin.py), as written: suite/gate/state.py parses them into the Gate
    latency_baseline: str | None = None
    latency_regression: str = "5%"
    latency_confidence: str = "99%"
    latency_busy_limit: str = "20%"
    latency_busy_retries: int = 2
    latency_case_bound: str = "4x"
    accept_incomplete_baseline: bool = False
    accuracy_baseline: str | None = None
    accuracy_drift: str = DriftTolerances().describe()
    inject_slowdown: str | None = None
    inject_accuracy_drop: str | None = None
    # other plugins' (None where the plugin is not installed): pytest-benchmark's, xdist's, pytest-html's, pytest's
    benchmark_compare: Any = None
    benchmark_compare_fail: Any = None
    benchmark_save: str | None = None
    benchmark_autosave: bool | None = None
    benchmark_json: Any = None
    benchmark_disable: bool | None = None
    #: --benchmark-storage, its cwd default made the project's (suite/hooks/configure.py hands it back to
    #: pytest-benchmark)
    benchmark_storage: str | None = None
    numprocesses: int | None = None
    markexpr: str = ""
    verbose: int = 0
    htmlpath: str | None = None


#: The run's SuiteOptions (every process: an xdist worker reads its own, from the same command line).
OPTIONS_KEY: pytest.StashKey[SuiteOptions] = pytest.StashKey()


def options_of(config: pytest.Config) -> SuiteOptions:
    """The run's options: read at the first call, in pytest_configure (whichever of the suite's plugins configures
    first), and kept under OPTIONS_KEY."""
    if OPTIONS_KEY not in config.stash:
        config.stash[OPTIONS_KEY] = read_options(config)
    return config.stash[OPTIONS_KEY]


def requested_device(config: pytest.Config) -> str:
    """--device as written, for xdist's ``-n auto``, which is resolved before pytest_configure (and before xdist
    has set the options the SuiteOptions hold)."""
    return str(config.getoption("--device"))


def read_options(config: pytest.Config) -> SuiteOptions:
    """Every option the suite reads, once: the only ``getoption`` calls of the suite."""
    requested = config.getoption("--device")
    storage = config.getoption("benchmark_storage", None)
    return SuiteOptions(
        suite_config=config.getoption("--suite-config"), models=config.getoption("--models"),
        engines=config.getoption("--engines"), precisions=config.getoption("--precisions"),
        engine_cache=config.getoption("--engine-cache"), device_requested=requested,
        device="cuda:0" if requested == "cuda" or device.BOUND_GPU is not None else requested,
        latency_rounds=config.getoption("--latency-rounds"),
        latency_batch_sizes=config.getoption("--latency-batch-sizes"),
        node_profile=config.getoption("--node-profile"), kernel_profile=config.getoption("--kernel-profile"),
        latency_paths=config.getoption("--latency-paths"), overhead_model=config.getoption("--overhead-model"),
        max_harness_overhead=config.getoption("--max-harness-overhead"),
        suite_results=config.getoption("--suite-results"), rebuild_check=config.getoption("--rebuild-check"),
        localize=config.getoption("--localize"), accept_not_judged=config.getoption("--accept-not-judged"),
        plan=config.getoption("--plan", None), shard=config.getoption("--shard", None),
        latency_baseline=config.getoption("--latency-baseline"),
        latency_regression=config.getoption("--latency-regression"),
        latency_confidence=config.getoption("--latency-confidence"),
        latency_busy_limit=config.getoption("--latency-busy-limit"),
        latency_busy_retries=config.getoption("--latency-busy-retries"),
        latency_case_bound=config.getoption("--latency-case-bound"),
        accept_incomplete_baseline=config.getoption("--accept-incomplete-baseline"),
        accuracy_baseline=config.getoption("--accuracy-baseline"),
        accuracy_drift=config.getoption("--accuracy-drift"),
        inject_slowdown=config.getoption("--inject-slowdown"),
        inject_accuracy_drop=config.getoption("--inject-accuracy-drop"),
        benchmark_compare=config.getoption("benchmark_compare", None),
        benchmark_compare_fail=config.getoption("benchmark_compare_fail", None),
        benchmark_save=config.getoption("benchmark_save", None),
        benchmark_autosave=config.getoption("benchmark_autosave", None),
        benchmark_json=config.getoption("benchmark_json", None),
        benchmark_disable=config.getoption("benchmark_disable", None),
        benchmark_storage=f"file://{_ROOT / '.benchmarks'}" if storage == _CWD_STORAGE else storage,
        numprocesses=config.getoption("numprocesses", None), markexpr=config.getoption("markexpr", "") or "",
        verbose=config.getoption("verbose"), htmlpath=config.getoption("htmlpath", None),
    )


def add_options(parser: pytest.Parser) -> None:
    """The suite's options (the gate's own are in suite/gate/plugin.py), for pytest_addoption."""
    group = parser.getgroup("inference-suite", "inference regression suite")
    group.addoption("--suite-config", default=str(_ROOT / "suite.toml"),
                    help="TOML file declaring models, engines, precisions, thresholds (default: suite.toml)")
    group.addoption("--models", default=None, help="comma-separated model names to run (default: all)")
    group.addoption("--engines", default=None,
                    help="comma-separated engines to run: torch, onnxruntime, inductor, tensorrt (default: as "
                         "configured). Engines named here are required: a cell of theirs that cannot run fails")
    group.addoption("--precisions", default=None,
                    help="comma-separated precisions: fp32, tf32, fp16, bf16, int8 (default: as configured)")
    group.addoption("--engine-cache", default=str(_ROOT / ".engine-cache"),
                    help="directory of the content-addressed engine/artifact cache (default: .engine-cache/)")
    group.addoption("--device", default="cpu",
                    help="device to run engines on: cpu (default), cuda:N (one GPU), or cuda (every visible GPU, "
                         "one pytest-xdist worker each, with -n auto); CUDA must initialise or the run stops before "
                         "any test")
    group.addoption("--latency-rounds", type=int, default=None,
                    help="timed rounds per latency case (default: [latency].rounds in the config)")
    group.addoption("--latency-batch-sizes", default=None,
                    help="comma-separated batch sizes for latency cases (default: each model's latency_batch_sizes)")
    group.addoption("--node-profile", type=int, default=0, metavar="RUNS",
                    help="after each ONNX Runtime latency case (path all), profile RUNS runs of its feed with ONNX "
                         "Runtime's profiler in a session of their own and record each node's median time, so that "
                         "a case that moves against a baseline run made with it says which nodes moved (default 0: "
                         "off)")
    group.addoption("--kernel-profile", type=int, default=0, metavar="RUNS",
                    help="after each GPU latency case, profile RUNS calls of its path with torch.profiler and record "
                         "the kernels one inference launches with their GPU time (any engine's), so that a case that "
                         "moves against a baseline run made with it says whether other kernels ran (default 0: off)")
    group.addoption("--latency-paths", default=None,
                    help="comma-separated latency paths: all (host copies included), model (device-resident), "
                         "graph (CUDA graph replay); default: all on cpu, all,model,graph on cuda")
    group.addoption("--overhead-model", default=None,
                    help="model for the GPU harness-overhead check (default: the first configured model)")
    group.addoption("--max-harness-overhead", type=float, default=0.02,
                    help="largest accepted harness overhead as a fraction of the bare loop (default 0.02)")
    group.addoption("--suite-results", default=None,
                    help="write accuracy/parity/latency records, engine facts and the verdict of this run to this "
                         "JSON file at the end, atomically, marked complete or not (and each record, as it is "
                         "made, to FILE.partial.jsonl)")
    group.addoption("--rebuild-check", type=int, default=0, metavar="N",
                    help="build each selected engine N times from scratch, bypassing the cache, and report whether "
                         "artifacts and outputs are identical (tests/parity/test_rebuild.py; off by default)")
    group.addoption("--localize", action="store_true", default=False,
                    help="localize every parity cell (first diverging layer, worst layers; docs/localization.md), "
                         "not only the failing ones")
    group.addoption("--accept-not-judged", default=None, metavar="REASONS",
                    help="comma-separated reasons for which a check may end 'not judged' and the run still exit 0 "
                         f"({', '.join(verdict.REASONS)}; 'none' for no reason); default: the config's "
                         "[run] accept_not_judged")


def split_list(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def overhead_model(config: pytest.Config) -> str | None:
    """The model the harness-overhead check uses: --overhead-model, else the first selected model."""
    return options_of(config).overhead_model or next(iter(config.stash[RUN_KEY].config.models), None)


def collect_only(config: pytest.Config) -> bool:
    """--collect-only builds and runs no model: there is nothing to check or prepare."""
    return bool(getattr(getattr(config, "option", None), "collectonly", False))


def check_options(config: pytest.Config, suite_config: SuiteConfig) -> None:
    """Options that would otherwise fail per test, or silently do nothing: one usage error each, at start-up."""
    given = options_of(config)
    paths = split_list(given.latency_paths) or []
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise pytest.UsageError(f"--latency-paths: unknown {unknown}; valid: {', '.join(PATHS)}")
    overhead = given.overhead_model
    if overhead is not None and overhead not in suite_config.models:
        raise pytest.UsageError(f"--overhead-model {overhead!r}: not among the selected models "
                                f"({', '.join(suite_config.models)})")
    limit = given.max_harness_overhead
    if not 0.0 < limit < 1.0:
        raise pytest.UsageError(f"--max-harness-overhead {limit!r}: a fraction of the bare loop's time in (0, 1), "
                                "e.g. 0.02 for 2%")
    if not str(given.engine_cache).strip():
        raise pytest.UsageError("--engine-cache: empty (an unset variable?); give a directory, or leave the option "
                                "out for .engine-cache/")
    results = given.suite_results
    if results is not None:
        path = Path(results)
        if not str(results).strip() or path.is_dir():
            raise pytest.UsageError(f"--suite-results {results!r}: give a file path, not a directory")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"--suite-results {results}: its directory cannot be made ({exc})") from exc
