"""The report opens with what differs between the baseline runs' environments and this run's (issue 26, item 2):
the pure difference (metrics/environment_diff.py), and a real run against a baseline whose recorded environment was
edited, whose terminal and HTML report name the difference before the verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from metrics.environment_diff import (
    KEY_ORDER,
    NO_DIFFERENCE,
    EnvironmentDifference,
    environment_differences,
    value_text,
)
from report.difference_section import difference_section
from suite.environment import LAYOUT_KEYS, differences
from suite.fleet import plugin as fleet
from suite.gate.baseline_environment import (
    block_lines,
    config_digest,
    config_keys,
    current_fingerprint,
    difference_block,
)
from suite.gate.baselines import saved_fingerprint
from tests.selftest.fake_options import options_stash
from tests.selftest.suite_runs import ROOT, explain, run_suite

pytestmark = pytest.mark.selftest

RUN: dict[str, Any] = {
    "device": "cuda:0", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_compute_capability": "9.0", "driver": "550.54.15",
    "cpu": "AMD EPYC 7R13", "cuda_runtime": "12.4", "cudnn": 90100, "onnxruntime-gpu": "1.20.1",
    "tensorrt": "10.7.0", "torch": "2.5.1", "python": "3.11.9", "numpy": "2.1.3",
    "onnxruntime_providers": ["TensorrtExecutionProvider", "CUDAExecutionProvider"],
    "suite_commit": "c152e7a0b1d2", "suite_config": "suite-gpu.toml sha256:0123456789ab",
}


@pytest.mark.parametrize("key", sorted(RUN))
def test_each_recorded_key_that_differs_is_one_difference_with_both_values(key: str) -> None:
    base = {**RUN, key: "other"}
    assert environment_differences(RUN, [base]) == [EnvironmentDifference(key, ("other",), RUN[key])]


def test_no_difference_is_an_empty_list_and_says_so() -> None:
    assert environment_differences(RUN, [dict(RUN), dict(RUN)]) == []
    assert NO_DIFFERENCE == "no difference in the recorded environment"


def test_a_key_recorded_on_one_side_only_differs_as_not_recorded() -> None:
    base = {k: v for k, v in RUN.items() if k != "tensorrt"}
    assert [d.describe() for d in environment_differences(RUN, [base])] == ["tensorrt: not recorded -> 10.7.0"]
    assert [d.describe() for d in environment_differences(base, [RUN])] == ["tensorrt: 10.7.0 -> not recorded"]


def test_order_is_hardware_then_cuda_then_engines_torch_python_and_the_suite_whatever_the_dicts_order() -> None:
    changed = {"suite_commit": "0", "numpy": "0", "python": "0", "torch": "0", "onnxruntime-gpu": "0", "tensorrt": "0",
               "cudnn": 1, "cuda_runtime": "0", "driver": "0", "gpu_name": "0", "zz_new_key": "0"}
    keys = [d.key for d in environment_differences({**RUN, "zz_new_key": "1"}, [{**RUN, **changed}])]
    assert keys[:10] == ["gpu_name", "driver", "cuda_runtime", "cudnn", "onnxruntime-gpu", "tensorrt", "torch",
                         "python", "numpy", "suite_commit"]
    assert keys[-1] == "zz_new_key"  # a key not in KEY_ORDER follows, it is not dropped
    assert KEY_ORDER.index("gpu_name") < KEY_ORDER.index("cuda_runtime") < KEY_ORDER.index("onnxruntime") \
        < KEY_ORDER.index("torch") < KEY_ORDER.index("python") < KEY_ORDER.index("suite_commit")


def test_several_baselines_that_disagree_show_every_value_oldest_first() -> None:
    runs = [{**RUN, "onnxruntime-gpu": "1.19.2"}, {**RUN, "onnxruntime-gpu": "1.20.0"},
            {**RUN, "onnxruntime-gpu": "1.19.2"}]
    (diff,) = environment_differences(RUN, runs)
    assert diff == EnvironmentDifference("onnxruntime-gpu", ("1.19.2", "1.20.0"), "1.20.1")
    assert diff.describe() == "onnxruntime-gpu: 1.19.2 | 1.20.0 -> 1.20.1"
    # one of them like this run still differs: the baselines mixed two stacks
    (mixed,) = environment_differences(RUN, [RUN, runs[0]])
    assert mixed.baseline == ("1.20.1", "1.19.2")
    assert environment_differences(RUN, []) == []  # no baseline, nothing to compare


def test_values_print_on_one_line_cudnn_as_a_version() -> None:
    (diff,) = environment_differences(RUN, [{**RUN, "cudnn": 8902}])
    assert diff.describe() == "cudnn: 8.9.2 (8902) -> 9.1.0 (90100)"
    assert diff.as_dict() == {"key": "cudnn", "baseline": [8902], "current": 90100}
    assert value_text("onnxruntime_providers", ["A", "B"]) == "A, B"
    assert value_text("workers", None) == "not recorded"


def test_the_xdist_workers_listing_is_not_an_environment_difference() -> None:
    assert environment_differences({**RUN, "workers": {"gw0": "x"}}, [RUN]) == []


ONE_WORKER = {"worker_count": 1, "worker_gpus": "0", "worker_cores": "gw0 32 cores (0-31)"}
TWO_WORKERS = {"worker_count": 2, "worker_gpus": "0,1", "worker_cores": "gw0 16 cores (0-15); gw1 16 cores (16-31)"}


def test_a_one_worker_and_a_two_worker_night_differ_by_workers_gpus_and_cores() -> None:
    """Issue 42 item 5: the same machine and stack, one worker (one GPU, every core) against two (a GPU and half
    the cores each): the difference names the spread, key by key, on one line each."""
    diffs = environment_differences({**RUN, **TWO_WORKERS}, [{**RUN, **ONE_WORKER}])
    assert [d.describe() for d in diffs] == [
        "worker_count: 1 -> 2", "worker_gpus: 0 -> 0,1",
        "worker_cores: gw0 32 cores (0-31) -> gw0 16 cores (0-15); gw1 16 cores (16-31)"]
    assert environment_differences({**RUN, **TWO_WORKERS}, [{**RUN, **TWO_WORKERS}]) == []
    # the gate's DIFFERENT ENVIRONMENT warning (a warning, never a usage error) compares them too
    assert differences({**RUN, **ONE_WORKER}, {**RUN, **TWO_WORKERS}) == {
        "worker_count": (1, 2), "worker_gpus": ("0", "0,1"),
        "worker_cores": ("gw0 32 cores (0-31)", "gw0 16 cores (0-15); gw1 16 cores (16-31)")}
    # a baseline saved before the spread was recorded: not recorded -> this run's
    assert [d.describe() for d in environment_differences({**RUN, **ONE_WORKER}, [RUN])] == [
        "worker_count: not recorded -> 1", "worker_gpus: not recorded -> 0",
        "worker_cores: not recorded -> gw0 32 cores (0-31)"]
    assert set(differences(RUN, {**RUN, **ONE_WORKER})) == set(LAYOUT_KEYS)
    # before the workers report (the run's header, a worker's own failure note) this run's side has no spread yet:
    # not a difference
    assert differences({**RUN, **TWO_WORKERS}, RUN) == {}


class _Fleet:
    def __init__(self, environments: dict[str, dict[str, Any]], affinity: dict[str, list[int]]) -> None:
        self.worker_environments, self.worker_affinity = environments, affinity


class _Config:
    def __init__(self, fleet_plugin: _Fleet, **options: Any) -> None:
        self.stash = options_stash(**options)
        self.pluginmanager = type("PM", (), {"get_plugin": lambda _, name: fleet_plugin})()


def test_the_layout_is_each_workers_own_report_in_worker_order(monkeypatch: pytest.MonkeyPatch) -> None:
    reported = {f"gw{i}": {"cuda_visible_devices": str(i)} for i in (10, 2, 0, 1)}
    affinity = {"gw0": [0, 1], "gw1": [2, 3], "gw2": [4, 6], "gw10": [5]}
    layout = fleet.worker_layout(_Config(_Fleet(reported, affinity), numprocesses=4))  # type: ignore[arg-type]
    assert layout == {"worker_count": 4, "worker_gpus": "0,1,2,10",
                      "worker_cores": "gw0 2 cores (0-1); gw1 2 cores (2-3); gw2 2 cores (4,6); gw10 1 core (5)"}
    cpu_workers = {"gw0": {"cuda_visible_devices": None}, "gw1": {"cuda_visible_devices": None}}
    assert fleet.worker_layout(_Config(_Fleet(cpu_workers, {}), numprocesses=2))["worker_gpus"] == "none"  # type: ignore[arg-type]
    # xdist workers that sent nothing (stopped early): what the run asked for, no cores
    monkeypatch.setenv("SUITE_WORKER_GPUS", "3,5")
    assert fleet.worker_layout(_Config(_Fleet({}, {}), numprocesses=2)) == {  # type: ignore[arg-type]
        "worker_count": 2, "worker_gpus": "3,5"}
    # one process, no xdist: one worker, its --device's GPU, its own cores
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setattr(fleet, "_affinity", lambda: [0, 1, 2, 3])
    assert fleet.worker_layout(_Config(_Fleet({}, {}), device="cuda:1")) == {  # type: ignore[arg-type]
        "worker_count": 1, "worker_gpus": "6", "worker_cores": "main 4 cores (0-3)"}
    assert fleet.worker_layout(_Config(_Fleet({}, {}), device="cpu"))["worker_gpus"] == "none"  # type: ignore[arg-type]


def test_the_block_names_its_baselines_and_sets_apart_one_that_recorded_nothing() -> None:
    block = difference_block(RUN, [("0001_a.json", {**RUN, "driver": "535.104.05"}), ("old.json", {})])
    assert block == {"baselines": ["0001_a.json", "old.json"], "unrecorded": ["old.json"],
                     "differences": [{"key": "driver", "baseline": ["535.104.05"], "current": "550.54.15"}]}
    assert block_lines(block) == ["environment: baseline (0001_a.json; old.json) -> this run:",
                                  "  driver  535.104.05  ->  550.54.15",
                                  "  not compared, no environment recorded: old.json"]
    same = difference_block(RUN, [("0001_a.json", dict(RUN))])
    assert same is not None and block_lines(same)[1:] == [f"  {NO_DIFFERENCE}"]
    assert NO_DIFFERENCE not in "".join(block_lines(difference_block(RUN, [("old.json", {})]) or {}))
    assert difference_block(RUN, []) is None  # no baseline: no block at all


def test_a_saved_run_carries_the_suites_commit_and_config_in_either_format() -> None:
    env = {"device": "cpu", "onnxruntime": "1.20.1"}
    benchmark = {"benchmarks": [], "machine_info": {"suite_environment": env},
                 "suite": {"git_commit": "c152e7a0b1d2", "config_digest": "suite.toml sha256:0123456789ab"},
                 "commit_info": {"id": "f" * 40, "dirty": False}}
    expected = {**env, "suite_commit": "c152e7a0b1d2", "suite_config": "suite.toml sha256:0123456789ab",
                "suite_config_keys": None}
    assert saved_fingerprint(benchmark) == expected
    results = {"records": [], "environment": env,
               "run": {"git_commit": "c152e7a0b1d2", "config_digest": "suite.toml sha256:0123456789ab"}}
    assert saved_fingerprint(results) == expected
    # saved before the suite recorded its commit: pytest-benchmark's commit_info
    older = {**benchmark, "suite": {}, "commit_info": {"id": "a" * 40, "dirty": True}}
    assert saved_fingerprint(older)["suite_commit"] == "aaaaaaaaaaaa (uncommitted changes)"
    assert saved_fingerprint({**benchmark, "machine_info": {}}) == {}  # no fingerprint: nothing to compare


def test_a_config_change_is_named_by_key_not_only_by_the_files_digest(tmp_path: Path) -> None:
    """Issue 46: the MiniLM fusion run's block said only ``suite_config sha256:1aeb24a001a2 -> sha256:bf0529a00a3d``
    when one engine option of one model was removed. Each key that differs is named, with both values; a baseline
    saved before the keys were recorded compares none of them (each would read as changed)."""
    base, run = tmp_path / "base.toml", tmp_path / "run.toml"
    base.write_text('[models.minilm_l6_fused]\nprecisions = ["fp32", "fp16"]\n'
                    '[models.minilm_l6_fused.engine_options.onnxruntime]\ntransformer_fusion = "bert"\n'
                    'graph_optimization_level = "all"\n')
    run.write_text('[models.minilm_l6_fused]\nprecisions = ["fp32", "fp16"]\n'
                   '[models.minilm_l6_fused.engine_options.onnxruntime]\ngraph_optimization_level = "basic"\n')
    keys = config_keys(base)
    assert keys == {"models.minilm_l6_fused.precisions": '["fp32", "fp16"]',
                    "models.minilm_l6_fused.engine_options.onnxruntime.transformer_fusion": '"bert"',
                    "models.minilm_l6_fused.engine_options.onnxruntime.graph_optimization_level": '"all"'}
    current = current_fingerprint(RUN, {"config_digest": config_digest(run), "config_keys": config_keys(run)})
    saved = {**RUN, "suite_config": config_digest(base), "suite_config_keys": keys}
    block = difference_block(current, [("base.json", saved)])
    assert block is not None
    lines = block_lines(block)
    assert any(line.split()[:1] == ["suite_config"] for line in lines)
    fusion = [line for line in lines if "transformer_fusion" in line]
    level = [line for line in lines if "graph_optimization_level" in line]
    assert len(fusion) == 1 and fusion[0].split() == [
        "config", "models.minilm_l6_fused.engine_options.onnxruntime.transformer_fusion", '"bert"', "->", "not", "set"]
    assert len(level) == 1 and level[0].split()[-3:] == ['"all"', "->", '"basic"']
    assert not any("precisions" in line for line in lines)  # the same on both sides
    older = difference_block(current, [("old.json", {**saved, "suite_config_keys": None})])
    assert older is not None and not any(line.split()[:1] == ["config"] for line in block_lines(older))
    assert config_keys(tmp_path / "absent.toml") is None


def test_html_section_lists_baselines_and_rows_in_order_and_says_when_nothing_differs() -> None:
    block = difference_block(RUN, [("a.json", {**RUN, "torch": "2.4.0", "driver": "535"}),
                                   ("b.json", {**RUN, "torch": "2.4.1", "driver": "535"})])
    html = difference_section(block)
    assert html.startswith('<section id="suite-difference" class="differs">')
    assert "<code>a.json</code>" in html and "<code>b.json</code>" in html
    rows = re.findall(r'<tr data-key="([^"]+)"><td class="name">[^<]+</td><td class="name">([^<]+)</td>'
                      r'<td class="name">([^<]+)</td></tr>', html)
    assert rows == [("driver", "535", "550.54.15"), ("torch", "2.4.0 | 2.4.1", "2.5.1")]
    same = difference_section(difference_block(RUN, [("a.json", dict(RUN))]))
    assert "No difference in the recorded environment." in same and "<table" not in same
    assert difference_section(None) == ""


LATENCY = (str(ROOT / "tests" / "latency" / "test_latency.py"),)


def test_a_run_against_baselines_from_another_onnxruntime_says_so_before_the_verdict(suite_baseline: Path,
                                                                                         tmp_path: Path) -> None:
    """Two copies of a real saved run, each with another onnxruntime recorded: the terminal, the results file and
    the HTML report name that difference, and only it, before the verdict."""
    saved = next((suite_baseline / "benchmarks").glob("*/0001_base.json"))
    data = json.loads(saved.read_text())
    assert data["suite"]["git_commit"] and data["suite"]["config_digest"], data["suite"]
    current = data["machine_info"]["suite_environment"]["onnxruntime"]
    baselines = []
    for name, version in (("old-ort-a.json", "0.0.1"), ("old-ort-b.json", "0.0.2")):
        data["machine_info"]["suite_environment"]["onnxruntime"] = version
        if version == "0.0.2":  # a run of its own, not a copy (the gate refuses copies of one run, issue 43)
            for bench in data["benchmarks"]:
                bench["stats"]["max"] = bench["stats"]["max"] * 1.001
        baselines.append(tmp_path / name)
        baselines[-1].write_text(json.dumps(data))
    report, results = tmp_path / "report.html", tmp_path / "results.json"
    done = run_suite(suite_baseline, "--models", "steady", "--latency-baseline", ",".join(map(str, baselines)),
                     "--html", str(report), "--self-contained-html", "--suite-results", str(results), tests=LATENCY)
    out = done.stdout
    assert "= WHAT DIFFERS FROM THE BASELINE =" in out, explain(done)
    block = out[out.index("= WHAT DIFFERS FROM THE BASELINE ="):out.index("VERDICT:")]
    assert re.findall(r"^  (\S+) +(.+?)  ->  (.+)$", block, flags=re.M) == [("onnxruntime", "0.0.1 | 0.0.2", current)]
    assert json.loads(results.read_text())["baseline_environment"]["differences"] == [
        {"key": "onnxruntime", "baseline": ["0.0.1", "0.0.2"], "current": current}]
    html = report.read_text()
    assert html.index('id="suite-difference"') < html.index('id="suite-verdict"') < html.index('id="results-table"')
    section = re.search(r'<section id="suite-difference".*?</section>', html, flags=re.S)
    assert section and re.findall(r'<tr data-key="([^"]+)">', section.group(0)) == ["onnxruntime"]
    assert f'<td class="name">0.0.1 | 0.0.2</td><td class="name">{current}</td>' in section.group(0)


def test_a_run_against_a_two_worker_baseline_names_the_spread_in_the_warning_block_and_results(
        suite_baseline: Path, tmp_path: Path) -> None:
    """Issue 42 item 5: the saved run records how it was spread; a one-process run against a baseline recorded with
    two workers warns of a DIFFERENT ENVIRONMENT naming the workers, the GPUs and the cores (a warning: the run
    still judges), and its results file and difference block say the same."""
    saved = next((suite_baseline / "benchmarks").glob("*/0001_base.json"))
    data = json.loads(saved.read_text())
    recorded = data["machine_info"]["suite_environment"]
    assert recorded["worker_count"] == 1 and recorded["worker_cores"].startswith("main "), recorded
    assert json.loads((suite_baseline / "base.json").read_text())["environment"]["worker_count"] == 1
    data["machine_info"]["suite_environment"] = {**recorded, **TWO_WORKERS}
    baseline = tmp_path / "two-workers.json"
    baseline.write_text(json.dumps(data))
    results = tmp_path / "results.json"
    done = run_suite(suite_baseline, "--models", "steady", "--latency-baseline", str(baseline),
                     "--suite-results", str(results), tests=LATENCY)
    out = done.stdout
    assert done.returncode != 4 and "VERDICT:" in out, explain(done)  # not a usage error
    warning = out[out.index("WARNING: latency baseline from a DIFFERENT ENVIRONMENT"):]
    assert re.search(r"^  worker_count +2  ->  1$", warning, flags=re.M), explain(done)
    assert re.search(r"^  worker_gpus +0,1  ->  none$", warning, flags=re.M), explain(done)  # a CPU run
    assert re.search(r"^  worker_cores +gw0 16 cores \(0-15\); gw1 16 cores \(16-31\)  ->  main \d+ cores? \(",
                     warning, flags=re.M), explain(done)
    block = out[out.index("= WHAT DIFFERS FROM THE BASELINE ="):out.index("VERDICT:")]
    assert [k for k, *_ in re.findall(r"^  (\S+) +(.+?)  ->  (.+)$", block, flags=re.M)] == list(LAYOUT_KEYS)
    written = json.loads(results.read_text())
    assert [d["key"] for d in written["baseline_environment"]["differences"]] == list(LAYOUT_KEYS)
    assert written["environment"]["worker_count"] == 1
