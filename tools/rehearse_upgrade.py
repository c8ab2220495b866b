"""Rehearse an engine upgrade: baselines with the old version, then the new one gated against them, one report.

What a deployment team does before it ships an ONNX Runtime upgrade, from one command (issue 26):

1. the old version is installed beside the project's environment, into DIR/old-site (``pip install --target``,
   without dependencies: the project's own numpy, protobuf, ... stay), and put first on PYTHONPATH;
2. the tier runs ``--runs`` times with it, each run saving a pytest-benchmark baseline and its --suite-results;
3. the tier runs once with the version the environment has (the new one), gated against the last ``--runs``
   baselines (``--latency-baseline last:K``) and the last old run's figures (``--accuracy-baseline``), writing
   DIR/report.html and DIR/new.json.

Each run's own environment record is checked: a run that imported another version than the one it was meant to
use stops the rehearsal (a baseline of the wrong version would make the comparison a lie).

    suite-rehearse-upgrade --old 1.22.0 [--package onnxruntime] [--runs 3] [--dir rehearsal] [-- PYTEST ARGS]

Default pytest arguments: the CPU tier's ONNX Runtime fp32 and int8 cells of digits_cnn, parity and latency (a
few minutes on a 2-core machine; fp16, bf16 and tf32 run in fp32 on the CPU EP, so they judge nothing there).
Exit status: the gated run's (0 passed, 1 failed, 75 not judged), 2 when the rehearsal itself could not be made
(a baseline run that did not pass included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTEST_ARGS = ("--suite-config", "suite.toml", "--models", "digits_cnn", "--engines", "onnxruntime",
                       "--precisions", "fp32,int8", "tests/parity", "tests/latency/test_latency.py")
#: The environment record's key that says which version of the package a run imported (suite/environment.py).
IMPORTED_KEY = {"onnxruntime": "onnxruntime_imported", "onnxruntime-gpu": "onnxruntime_imported"}


class RehearsalError(RuntimeError):
    """The rehearsal could not be made as asked (install failed, a run used another version)."""


@dataclass(frozen=True)
class Step:
    """One command of the rehearsal, with the extra environment it runs under, what it must have imported, and
    whether it makes a baseline (then it must pass: a baseline is the standard the new version is held to)."""

    label: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    results: Path | None = None
    expect_version: str | None = None
    baseline: bool = False


def plan(package: str, old: str, new: str, runs: int, directory: Path, pytest_args: Sequence[str],
         engine_cache: Path, python: str = sys.executable) -> list[Step]:
    """The rehearsal's commands, in order: install the old version, ``runs`` baseline runs with it, one gated run
    with the new one. The engine cache is shared: every entry an engine library builds is keyed on its version, so
    the two versions never share an engine, while the trained models and exported graphs are made once. Pure:
    tests read it without running anything."""
    site = directory / "old-site"
    storage = f"file://{directory / 'benchmarks'}"
    common = ("-p", "no:cacheprovider", "--engine-cache", str(engine_cache),
              "--benchmark-storage", storage, *pytest_args)
    old_env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    steps = [Step("install", (python, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target",
                              str(site), f"{package}=={old}"))]
    for i in range(1, runs + 1):
        results = directory / f"old-{i}.json"
        steps.append(Step(f"old {i}/{runs}", (python, "-m", "pytest", *common, "--benchmark-save", f"old{i}",
                                              "--suite-results", str(results),
                                              "--accept-not-judged", "no-baseline,unsupported,no-data"),
                          old_env, results, old, baseline=True))
    results = directory / "new.json"
    steps.append(Step("new", (python, "-m", "pytest", *common, "--latency-baseline", f"last:{runs}",
                              "--accuracy-baseline", str(directory / f"old-{runs}.json"),
                              "--suite-results", str(results), "--html", str(directory / "report.html"),
                              "--self-contained-html"), {}, results, new))
    return steps


def imported_version(results: Path, package: str) -> str | None:
    """The version of ``package`` the run recorded in its --suite-results environment."""
    try:
        environment = json.loads(results.read_text()).get("environment", {})
    except (OSError, ValueError):
        return None
    return environment.get(IMPORTED_KEY.get(package, package)) or environment.get(package)


def rehearse(steps: list[Step], package: str,
             run: Callable[[Step], int] = lambda s: subprocess.run(
                 s.argv, cwd=ROOT, env={**os.environ, **s.env}, check=False).returncode,
             say: Callable[[str], None] = print) -> int:
    """Run the steps; the last step's exit status. A failed install, a baseline run that did not pass or wrote no
    results, or any run that imported another version than it was meant to raise RehearsalError."""
    status = 0
    for step in steps:
        say(f"== rehearsal: {step.label}: {' '.join(step.argv[2:8])} ...")
        status = run(step)
        if step.results is None:
            if status != 0:
                raise RehearsalError(f"{step.label} failed (exit {status}): {' '.join(step.argv)}")
            continue
        got = imported_version(step.results, package)
        if got is None:
            raise RehearsalError(f"{step.label}: the run wrote no usable {step.results} (exit {status})")
        if step.expect_version is not None and got != step.expect_version:
            raise RehearsalError(f"{step.label}: the run imported {package} {got}, not {step.expect_version}: "
                                 "its figures would be compared as the wrong version")
        say(f"== rehearsal: {step.label}: {package} {got}, pytest exit {status}")
        if step.baseline and status != 0:
            raise RehearsalError(f"{step.label}: the baseline run did not pass (exit {status}; its verdict is in "
                                 f"{step.results}): figures that failed or were not judged cannot be the standard")
    return status


def installed_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError as exc:
        raise RehearsalError(f"{package} is not installed in this environment: nothing to upgrade to") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="onnxruntime", help="the package to upgrade (default onnxruntime)")
    parser.add_argument("--old", required=True,
                        help="the version to upgrade from (installed beside, for the baselines)")
    parser.add_argument("--runs", type=int, default=3, help="baseline runs with the old version (default 3)")
    parser.add_argument("--dir", default="rehearsal", help="where the rehearsal keeps everything (default rehearsal/)")
    parser.add_argument("--engine-cache", default=str(ROOT / ".engine-cache"),
                        help="the engine cache both versions use (default the project's .engine-cache/)")
    parser.add_argument("pytest_args", nargs="*", help="pytest arguments after --, instead of the default tier")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    directory = Path(args.dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        new = installed_version(args.package)
        if new == args.old:
            raise RehearsalError(f"{args.package} {new} is installed already: --old must be another version")
        steps = plan(args.package, args.old, new, args.runs, directory, args.pytest_args or DEFAULT_PYTEST_ARGS,
                     Path(args.engine_cache).resolve())
        status = rehearse(steps, args.package)
    except RehearsalError as exc:
        print(f"rehearsal: {exc}", file=sys.stderr)
        return 2
    print(f"== rehearsal: {args.package} {args.old} -> {new}: report {directory / 'report.html'}, "
          f"results {directory / 'new.json'}; gated run exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
