"""Baselines that cannot lie (issue 23, 'Baselines that lie'): a run made with a self-test knob is marked in every
file it writes and refused as a baseline; an accuracy baseline comes from a run that passed; ``last:0`` and one run
named twice are usage errors; run ids past 9999 are found, in order. The end-to-end cases (each a child run that
ended green or compared against the wrong thing before) are in the hostile corpus (test_hostile_inputs.py,
'baselines that lie'); here, the rules themselves and the marks a real run writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.gate.baselines import (
    BaselineError,
    _machine_id,
    load_latency_baselines,
    load_results_baseline,
    resolve_latency_baselines,
    self_test_knobs,
)
from suite.verdict import EXIT_NOT_JUDGED
from tests.selftest.suite_runs import ROOT, explain, run_suite

pytestmark = pytest.mark.selftest


def _storage(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "bench" / _machine_id()
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text("{}")
    return tmp_path / "bench"


def test_run_ids_past_9999_are_found_in_their_order(tmp_path: Path) -> None:
    storage = _storage(tmp_path, "0002_a.json", "9999_b.json", "10000_c.json", "10001_d.json", "notes.json")
    assert [p.name for p in resolve_latency_baselines("latest", storage)] == ["10001_d.json"]
    assert [p.name for p in resolve_latency_baselines("last:3", storage)] == ["9999_b.json", "10000_c.json",
                                                                              "10001_d.json"]
    assert [p.name for p in resolve_latency_baselines("10000", storage)] == ["10000_c.json"]


def test_last_0_and_a_run_named_twice_are_refused(tmp_path: Path) -> None:
    storage = _storage(tmp_path, "0001_a.json", "0002_b.json")
    with pytest.raises(BaselineError, match="K must be at least 1"):
        resolve_latency_baselines("last:0", storage)
    for spec in ("0001,0001", "0001,0001_a", "last:2,0002"):
        with pytest.raises(BaselineError, match="names the same run more than once"):
            resolve_latency_baselines(spec, storage)
    assert len(resolve_latency_baselines("0001,0002", storage)) == 2


def test_copies_of_one_run_are_not_several_runs(tmp_path: Path) -> None:
    """Issue 43: three byte-identical copies of one run were accepted as a three-run baseline, whose run-to-run
    spread is zero. A copy renamed or re-dated is refused the same; runs that differ in one round are two runs."""
    extra = {"model": "m", "engine": "onnxruntime", "precision": "fp32", "batch_size": 1, "path": "latency-all",
             "samples_s": [1e-3, 1.1e-3, 1.05e-3, 0.98e-3, 1.02e-3, 1.01e-3]}
    run = {"benchmarks": [{"name": "b", "extra_info": extra}], "machine_info": {}, "datetime": "2026-11-28"}
    paths = [tmp_path / f"000{i}_night.json" for i in (1, 2, 3)]
    for path in paths:
        path.write_text(json.dumps(run))
    with pytest.raises(BaselineError, match=r"--latency-baseline: \S+0002_night.json holds the same cases and rounds "
                       r"as \S+0001_night.json, a copy of one run: .*name each run once"):
        load_latency_baselines(paths)
    reordered = {"datetime": "2026-11-29", "benchmarks": [{"extra_info": dict(reversed(extra.items())), "name": "b"}]}
    paths[1].write_text(json.dumps(reordered, indent=1))  # re-dated, its keys written in another order
    with pytest.raises(BaselineError, match="a copy of one run"):
        load_latency_baselines(paths[:2])
    other = {**extra, "samples_s": [*extra["samples_s"][:-1], 1.03e-3]}
    paths[2].write_text(json.dumps({**run, "benchmarks": [{"name": "b", "extra_info": other}]}))
    assert len(load_latency_baselines([paths[0], paths[2]]).samples[("m", "onnxruntime", "fp32", "bs1", "all")]) == 2


@pytest.mark.parametrize("verdict", ["failed", "not judged", None])
def test_an_accuracy_baseline_comes_from_a_run_that_passed(tmp_path: Path, verdict: str | None) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"complete": True, "verdict": {"verdict": verdict}, "records": []}))
    with pytest.raises(BaselineError, match=f"its run's verdict was {verdict or 'missing'}, not passed"):
        load_results_baseline(path)
    path.write_text(json.dumps({"complete": True, "verdict": {"verdict": "passed"}, "records": []}))
    assert load_results_baseline(path).records == {}


def test_a_run_with_a_knob_marks_every_file_it_writes_and_none_becomes_a_baseline(tmp_path: Path) -> None:
    latency = (str(ROOT / "tests" / "latency" / "test_latency.py"),)
    done = run_suite(tmp_path, "--models", "steady", "--inject-slowdown", "50%", "--latency-rounds", "4",
                     "--benchmark-save", "knob", "--benchmark-json", str(tmp_path / "b.json"),
                     "--suite-results", str(tmp_path / "r.json"), tests=latency)
    assert done.returncode in (0, 1, EXIT_NOT_JUDGED), explain(done)
    saved = next((tmp_path / "benchmarks").rglob("*_knob.json"))
    for path in (saved, tmp_path / "b.json", tmp_path / "r.json"):
        assert self_test_knobs(json.loads(path.read_text())) == {"--inject-slowdown": 0.5}, path
    for args in (("--latency-baseline", str(saved)), ("--benchmark-compare", "0001"),
                 ("--accuracy-baseline", str(tmp_path / "r.json"))):
        refused = run_suite(tmp_path, "--models", "steady", "--latency-rounds", "4", *args, tests=latency)
        assert refused.returncode == 4, explain(refused)
        assert "was made with a self-test knob (--inject-slowdown 50%)" in refused.stderr + refused.stdout, \
            explain(refused)
    plain = run_suite(tmp_path, "--models", "steady", "--latency-rounds", "4", "--benchmark-save", "plain",
                      "--suite-results", str(tmp_path / "plain.json"), tests=latency)
    assert plain.returncode in (0, 1, EXIT_NOT_JUDGED), explain(plain)
    assert self_test_knobs(json.loads((tmp_path / "plain.json").read_text())) == {}
    assert "self_test_knobs" not in json.loads(next((tmp_path / "benchmarks").rglob("*_plain.json")).read_text())[
        "suite"]


def test_a_self_test_plugin_marks_the_files_as_a_knob_does(tmp_path: Path) -> None:
    """tools/seeded_dup_conv.py (-p) computes a conv twice in every torch runner: a run made with it saves figures of
    that change, so every file it writes says so and none is taken as a baseline."""
    parity = (str(ROOT / "tests" / "parity" / "test_parity.py"),)
    env = {"SEEDED_DUP_CONV": "layer4.0.conv1"}
    done = run_suite(tmp_path, "-p", "tools.seeded_dup_conv", "--suite-results", str(tmp_path / "r.json"),
                     tests=parity, env=env)
    assert done.returncode in (0, 1, EXIT_NOT_JUDGED), explain(done)
    knobs = self_test_knobs(json.loads((tmp_path / "r.json").read_text()))
    assert knobs == {"-p tools.seeded_dup_conv": "layer4.0.conv1"}, explain(done)
    refused = run_suite(tmp_path, "--accuracy-baseline", str(tmp_path / "r.json"), tests=parity)
    assert refused.returncode == 4, explain(refused)
    assert "was made with a self-test knob (-p tools.seeded_dup_conv layer4.0.conv1)" in refused.stderr + refused.stdout
