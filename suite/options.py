"""The suite's command-line options: declared once, and checked at start-up where a wrong value would otherwise fail
every test or silently do nothing (one usage error each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite import verdict
from suite.config import SuiteConfig
from suite.state import RUN_KEY
from suite.timing import PATHS

_ROOT = Path(__file__).resolve().parent.parent


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
    return config.getoption("--overhead-model") or next(iter(config.stash[RUN_KEY].config.models), None)


def collect_only(config: pytest.Config) -> bool:
    """--collect-only builds and runs no model: there is nothing to check or prepare."""
    return bool(getattr(getattr(config, "option", None), "collectonly", False))


def check_options(config: pytest.Config, suite_config: SuiteConfig) -> None:
    """Options that would otherwise fail per test, or silently do nothing: one usage error each, at start-up."""
    paths = split_list(config.getoption("--latency-paths")) or []
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise pytest.UsageError(f"--latency-paths: unknown {unknown}; valid: {', '.join(PATHS)}")
    overhead = config.getoption("--overhead-model")
    if overhead is not None and overhead not in suite_config.models:
        raise pytest.UsageError(f"--overhead-model {overhead!r}: not among the selected models "
                                f"({', '.join(suite_config.models)})")
    limit = config.getoption("--max-harness-overhead")
    if not 0.0 < limit < 1.0:
        raise pytest.UsageError(f"--max-harness-overhead {limit!r}: a fraction of the bare loop's time in (0, 1), "
                                "e.g. 0.02 for 2%")
    if not str(config.getoption("--engine-cache")).strip():
        raise pytest.UsageError("--engine-cache: empty (an unset variable?); give a directory, or leave the option "
                                "out for .engine-cache/")
    results = config.getoption("--suite-results")
    if results is not None:
        path = Path(results)
        if not str(results).strip() or path.is_dir():
            raise pytest.UsageError(f"--suite-results {results!r}: give a file path, not a directory")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"--suite-results {results}: its directory cannot be made ({exc})") from exc
