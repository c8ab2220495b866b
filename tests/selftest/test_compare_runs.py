"""tools/compare_runs.py: two runs of the tier side by side (issue 22), and an A/A pair beside them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from suite.fleet.timeline import set_up_seconds
from tools import compare_runs


def _run(medians: dict[tuple[str, str], tuple[float, str]], wall: float, workers: int) -> dict:
    """A --suite-results file with latency records (cell, path) -> (median ms, bound), and one passed check each."""
    records = [{"kind": "latency", "cell": cell, "shape": "bs1", "path": path, "median_ms": ms, "bound": bound}
               for (cell, path), (ms, bound) in medians.items()]
    states = {f"test_latency[{cell}-bs1-{path}]": "passed" for cell, path in medians}
    return {"records": records, "verdict": {"verdict": "PASSED", "states": states},
            "run": {"wall_s": wall, "workers": workers}}


ONE = _run({("a", "graph"): (1.00, "device"), ("b", "graph"): (0.050, "device"), ("c", "all"): (2.0, "host")},
           300.0, 1)
TWO = _run({("a", "graph"): (1.01, "device"), ("b", "graph"): (0.053, "device"), ("c", "all"): (2.2, "host")},
           180.0, 2)
TWO_AGAIN = _run({("a", "graph"): (1.00, "device"), ("b", "graph"): (0.050, "device"), ("c", "all"): (2.1, "host")},
                 170.0, 2)


def test_the_a_a_pair_says_how_far_the_same_cases_move_between_identical_runs() -> None:
    result = compare_runs.compare(ONE, TWO, 0.02, TWO_AGAIN)
    assert list(result["device_bound_beyond_tolerance"]) == ["b bs1 graph"]  # +6 %; a moved 1 %
    aa = result["a_a"]
    assert aa["cases"] == 2 and aa["beyond_tolerance"] == 1 and aa["wall_s"] == 170.0
    assert aa["of_those_beyond"]["b bs1 graph"] == pytest.approx(0.050 / 0.053 - 1)
    assert aa["largest_change"] == pytest.approx(1 - 0.050 / 0.053)
    assert compare_runs.compare(ONE, TWO, 0.02)["a_a"] is None


def test_a_case_beyond_tolerance_whose_rounds_fell_in_two_modes_says_so() -> None:
    """A median that moved because half the rounds stalled is named as such, with the side that stalled."""
    one, two = json.loads(json.dumps(ONE)), json.loads(json.dumps(TWO))
    two["records"][1]["samples_s"] = [0.056e-3, 0.044e-3] * 15  # b: alternating slow and fast rounds
    one["records"][1]["samples_s"] = [0.050e-3] * 30
    two["records"][0]["samples_s"] = [1.3e-3, 1.0e-3] * 15  # a: two modes, but within tolerance: not listed
    result = compare_runs.compare(one, two, 0.02)
    assert result["beyond_in_two_modes"] == {
        "b bs1 graph": {"other": "rounds in two modes: 15 of 30 at 0.056 ms, the rest at 0.044 ms, one every 0.10 ms "
                                 "of rounds"}}
    assert compare_runs.compare(ONE, TWO, 0.02)["beyond_in_two_modes"] == {}


def test_the_median_ratio_of_each_path_and_bound_shows_where_the_time_went() -> None:
    ratios = compare_runs.ratios_by_class(ONE, TWO)
    assert ratios == {"all, host-bound": (1, pytest.approx(1.1)),
                      "graph, device-bound": (2, pytest.approx((1.01 + 1.06) / 2))}


def test_the_device_paths_set_up_is_summed_per_engine_and_path_largest_first() -> None:
    run = _run({("a", "graph"): (1.0, "device"), ("b", "graph"): (1.0, "device"), ("c", "all"): (1.0, "host")}, 1, 1)
    for record, engine, seconds in zip(run["records"], ("onnxruntime", "onnxruntime", "torch"), (5.0, 2.5, None),
                                       strict=True):
        record.update(engine=engine, prepare_s=seconds)
    run["records"].append({"kind": "latency", "engine": "torch", "path": "graph", "prepare_s": 9.0})
    assert list(set_up_seconds(run["records"]).items()) == [("torch graph", 9.0), ("onnxruntime graph", 7.5)]
    run["records"].pop()
    assert compare_runs.compare(ONE, run, 0.02)["set_up_s"] == ({}, {"onnxruntime graph": 7.5})


def test_the_command_prints_the_a_a_line_and_fails_on_a_median_beyond_tolerance(tmp_path: Path, capsys) -> None:
    paths = []
    for name, data in (("one", ONE), ("two", TWO), ("again", TWO_AGAIN)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    assert compare_runs.main([str(paths[0]), str(paths[1]), "--again", str(paths[2])]) == 1
    out = capsys.readouterr().out
    assert "b bs1 graph: 0.050 -> 0.053 ms (+6.0%); A/A -5.7%" in out
    assert "A/A (other against --again, made alike): 2 device-bound cases, 1 beyond 2%" in out
    assert "wall: 300.0 s (1 worker(s)) and 180.0 s (2 worker(s)): 0.600x" in out
    assert compare_runs.main([str(paths[0]), str(paths[1]), "--tolerance", "0.07"]) == 0


def test_a_gzipped_results_file_reads_as_the_plain_one(tmp_path: Path) -> None:
    """The sittings kept their results gzipped (docs/results/README.md): compare_runs reads them as they are kept."""
    (tmp_path / "two.json.gz").write_bytes(gzip.compress(json.dumps(TWO).encode()))
    assert compare_runs.load(str(tmp_path / "two.json.gz")) == TWO


ONE_AGAIN = _run({("a", "graph"): (1.00, "device"), ("b", "graph"): (0.050, "device"), ("c", "all"): (2.5, "host")},
                 400.0, 1)


def test_a_second_one_gpu_run_gives_the_ratio_against_both_and_the_hosts_drift(tmp_path: Path, capsys) -> None:
    bb = compare_runs.compare(ONE, TWO, 0.02, base_again=ONE_AGAIN)["base_again"]
    assert bb["wall_s"] == 400.0
    assert bb["wall_ratio"] == pytest.approx(180.0 / 400.0)
    assert bb["wall_ratio_to_mean"] == pytest.approx(180.0 / 350.0)
    assert bb["median_ratio_by_class"] == {"all, host-bound": (1, pytest.approx(1.25)),
                                           "graph, device-bound": (2, pytest.approx(1.0))}
    assert compare_runs.compare(ONE, TWO, 0.02)["base_again"] is None
    paths = []
    for name, data in (("one", ONE), ("two", TWO), ("one-again", ONE_AGAIN)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    compare_runs.main([str(paths[0]), str(paths[1]), "--base-again", str(paths[2])])
    out = capsys.readouterr().out
    assert "wall: 300.0 s (1 worker(s)) and 180.0 s (2 worker(s)): 0.600x" in out
    assert ("base again (made like base): wall 400.0 s; other against it 0.450x, against the mean of the two "
            "0.514x") in out
    assert "median ratio base again/base by path and bound (the host's drift): all, host-bound 1.250 (1)" in out


def test_both_configurations_made_twice_give_each_other_run_and_their_mean_against_the_bases_mean(
        tmp_path: Path, capsys) -> None:
    """ABBA (one GPU, two, one again, two again): the second two-GPU run and the mean of both against the mean of
    the one-GPU runs, beside the first's."""
    bb = compare_runs.compare(ONE, TWO, 0.02, again=TWO_AGAIN, base_again=ONE_AGAIN)["base_again"]
    assert bb["wall_ratio_to_mean"] == pytest.approx(180.0 / 350.0)
    assert bb["again_ratio_to_mean"] == pytest.approx(170.0 / 350.0)
    assert bb["others_mean_ratio_to_mean"] == pytest.approx(175.0 / 350.0)
    assert compare_runs.compare(ONE, TWO, 0.02, base_again=ONE_AGAIN)["base_again"]["others_mean_ratio_to_mean"] is None
    paths = []
    for name, data in (("one", ONE), ("two", TWO), ("two-again", TWO_AGAIN), ("one-again", ONE_AGAIN)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    compare_runs.main([str(paths[0]), str(paths[1]), "--again", str(paths[2]), "--base-again", str(paths[3])])
    assert ("against the mean of the two 0.514x; --again against that mean 0.486x, the mean of other and --again "
            "0.500x") in capsys.readouterr().out


def _timed(wall: float, workers: int, times: list[tuple[str, str, float]], spans: list[float]) -> dict:
    """A run whose test phases took ``times`` (test id, worker, seconds), its workers spanning ``spans`` seconds."""
    run = _run({("m1-torch-fp32", "graph"): (1.0, "device")}, wall, workers)
    run["records"] += [{"kind": "parity", "model": m, "engine": "torch", "precision": p}
                       for m, p in (("m1", "fp32"), ("m1_big", "fp16"))]
    run["run"]["test_times"] = [[nodeid, worker, "call", 0.0, s] for nodeid, worker, s in times]
    run["run"]["worker_time"] = {f"gw{i}": {"span_s": s, "setup_s": 0.0, "call_s": s, "teardown_s": 0.0, "idle_s": 0.0}
                                 for i, s in enumerate(spans)}
    return run


def test_the_growth_lines_say_which_model_and_test_took_longer_and_the_ratio_without_growth(
        tmp_path: Path, capsys) -> None:
    top1 = "tests/accuracy/test_accuracy.py::test_top1_top5[m1]"  # a test of the model, of no cell
    one = _timed(100.0, 1, [("tests/parity/test_parity.py::test_parity[m1-torch-fp32]", "gw0", 39.0),
                            (top1, "gw0", 1.0),
                            ("tests/latency/test_latency.py::test_latency[m1_big-torch-fp16-bs1-graph]", "gw0", 50.0)],
                 [95.0])
    two = _timed(60.0, 2, [("tests/parity/test_parity.py::test_parity[m1-torch-fp32]", "gw1", 42.0),
                           ("tests/parity/test_parity.py::test_parity[m1-torch-fp32-again]", "gw0", 1.0),  # split
                           (top1, "gw1", 1.0),
                           ("tests/latency/test_latency.py::test_latency[m1_big-torch-fp16-bs1-graph]", "gw0", 56.0)],
                 [56.0, 50.0])
    grew = compare_runs.compare(one, two, 0.02)["growth"]
    assert grew["test_seconds"] == (90.0, 100.0)
    assert list(grew["by_model"].items()) == [("m1_big", (50.0, 56.0)), ("m1", (40.0, 44.0))]  # largest change first
    assert grew["by_test"] == {"test_latency": (50.0, 56.0), "test_parity": (39.0, 43.0), "test_top1_top5": (1.0, 1.0)}
    assert list(grew["by_cell"].items()) == [("m1_big-torch-fp16", (50.0, 56.0)), ("m1-torch-fp32", (39.0, 43.0)),
                                             ("m1", (1.0, 1.0))]  # the cell, or the model for a test of no cell
    assert grew["cell_workers"] == {"m1-torch-fp32": "gw0+gw1", "m1": "gw1", "m1_big-torch-fp16": "gw0"}
    assert grew["ratio_without_growth"] == pytest.approx((90.0 / 2 + (60.0 - 56.0)) / 100.0)
    assert compare_runs.compare(ONE, TWO, 0.02)["growth"] is None  # no test times: nothing to say
    paths = [tmp_path / "one.json", tmp_path / "two.json"]
    for path, data in zip(paths, (one, two), strict=True):
        path.write_text(json.dumps(data))
    compare_runs.main([str(p) for p in paths])
    out = capsys.readouterr().out
    assert ("summed test time (every phase, every worker), base -> other: 90.0 -> 100.0 s (+11.1%); with none of "
            "that growth other would take 0.490x of base") in out
    assert "  by model (s): m1_big 50.0 -> 56.0 (+6.0), m1 40.0 -> 44.0 (+4.0)" in out
    assert ("  by cell, the 3 largest changes (s; other's worker): m1_big-torch-fp16 50.0 -> 56.0 (+6.0, gw0), "
            "m1-torch-fp32 39.0 -> 43.0 (+4.0, gw0+gw1), m1 1.0 -> 1.0 (+0.0, gw1)") in out
