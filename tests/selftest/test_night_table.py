"""tools/night_table.py: a sequence of gated nights as one markdown table (issue 42), from small synthetic results."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tools import night_table

pytestmark = pytest.mark.selftest

#: (cell, shape, path) -> bound of the synthetic tier: two device-bound cases, two host-bound ones
CASES = {("a-torch-fp16", "bs32", "graph"): "device", ("b-onnxruntime-fp16", "bs32", "all"): "device",
         ("a-torch-fp16", "bs1", "model"): "host", ("b-onnxruntime-fp16", "bs1", "all"): "host"}


def _night(medians: list[float], states: list[str], *, command: str = "", wall: float = 400.0,
           workers: int = 1, gpus: str = "0", verdict: str = "passed") -> dict[str, Any]:
    """A --suite-results file: one latency record and one latency check per case of CASES (in order), an
    unsupported latency case and an accuracy check beside them."""
    records, checks = [], {"tests/accuracy/test_accuracy.py::test_top1[a-torch-fp16]": "passed",
                           "tests/latency/test_latency.py::test_latency[a-torch-int8-bs1]": "not judged (unsupported)"}
    for (cell, shape, path), ms, state in zip(CASES, medians, states, strict=True):
        records.append({"kind": "latency", "cell": cell, "shape": shape, "path": path, "median_ms": ms,
                        "bound": CASES[(cell, shape, path)]})
        param = f"{cell}-{shape}" if path == "all" else f"{cell}-{shape}-{path}"
        checks[f"tests/latency/test_latency.py::test_latency[{param}]"] = state
    return {"complete": True, "records": records, "verdict": {"verdict": verdict, "states": checks},
            "environment": {"worker_count": workers, "worker_gpus": gpus},
            "run": {"wall_s": wall, "workers": workers, "command": command}}


NB = "not judged (no-baseline)"
NIGHTS = [
    _night([1.0, 2.0, 0.10, 0.20], [NB] * 4, wall=410.4),
    _night([1.01, 2.02, 0.13, 0.21], [NB] * 4, workers=2, gpus="0,1", wall=230.0,
           command="-n auto --accuracy-baseline=/tmp/nights/kept/results.json"),
    _night([0.99, 2.00, 0.12, 0.30], ["passed", "failed", "not judged (inconclusive)", "passed"], workers=2,
           gpus="0,1", verdict="failed", command="-n auto --latency-baseline=last:2 --accuracy-baseline /k/r.json"),
]


def _write(tmp_path: Path, name: str, data: dict[str, Any], gz: bool = False) -> str:
    path = tmp_path / name
    raw = json.dumps(data).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return str(path)


def test_each_night_is_a_row_with_its_gpus_baseline_wall_verdict_and_latency_judged_per_class(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [_write(tmp_path, "n1.json", NIGHTS[0]), _write(tmp_path, "n2.json.gz", NIGHTS[1], gz=True),
             _write(tmp_path, "n3.json", NIGHTS[2])]
    assert night_table.main([*paths, "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if re.match(r"\| n\d", line)]
    assert rows == [
        ["n1", "1 (0)", "none", "410", "passed", "0 of 4 (0 %)", "0", "0 of 2", "0 of 2", "no-baseline 4"],
        ["n2", "2 (0,1)", "none + accuracy", "230", "passed", "0 of 4 (0 %)", "0", "0 of 2", "0 of 2",
         "no-baseline 4"],
        ["n3", "2 (0,1)", "last:2 + accuracy", "400", "failed", "3 of 4 (75 %)", "1", "2 of 2", "1 of 2",
         "inconclusive 1"],
    ], out
    saved = json.loads((tmp_path / "t.json").read_text())
    assert [r["night"] for r in saved["nights"]] == ["n1", "n2", "n3"]
    assert saved["nights"][2]["per_class"] == {"device": {"judged": 2, "timed": 2}, "host": {"judged": 1, "timed": 2}}


def test_the_spread_is_each_cases_largest_median_over_its_smallest_median_and_p90_per_class() -> None:
    spread = night_table.spread(NIGHTS)
    # device: a 1.01/0.99, b 2.02/2.00; host: a 0.13/0.10, b 0.30/0.20
    device = sorted([1.01 / 0.99, 2.02 / 2.00])
    assert spread["device"]["cases"] == 2 and spread["host"]["cases"] == 2
    assert spread["device"]["median"] == pytest.approx(sum(device) / 2)
    assert spread["device"]["p90"] == pytest.approx(device[0] + 0.9 * (device[1] - device[0]))
    assert spread["host"]["median"] == pytest.approx(1.4) and spread["host"]["p90"] == pytest.approx(1.48)  # 1.3, 1.5
    # a case timed in one night only has no spread; one night alone: no case at all
    assert night_table.spread(NIGHTS[:1]) == {c: {"cases": 0, "median": None, "p90": None} for c in ("device", "host")}
    lone = _night([1.0, 2.0, 0.10, 0.20], [NB] * 4)
    lone["records"].append({"kind": "latency", "cell": "c-torch-fp16", "shape": "bs1", "path": "all",
                            "median_ms": 9.0, "bound": "host"})
    assert night_table.spread([lone, NIGHTS[1]])["host"]["cases"] == 2


def test_a_case_that_changed_class_counts_where_most_nights_put_it() -> None:
    flipped = json.loads(json.dumps(NIGHTS[2]))
    flipped["records"][0]["bound"] = "host"  # a-torch-fp16 bs32 graph: device, device, host
    spread = night_table.spread([NIGHTS[0], NIGHTS[1], flipped])
    assert spread["device"]["cases"] == 2 and spread["host"]["cases"] == 2


def test_percentile_and_the_baseline_option_read_as_numpy_and_the_command_line_do() -> None:
    assert night_table.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)
    assert night_table.percentile([3.0], 90) == 3.0
    assert night_table._option("-n auto --latency-baseline last:5 -q", "--latency-baseline") == "last:5"
    assert night_table._option("--latency-baseline=last:3", "--latency-baseline") == "last:3"
    assert night_table._option("-q", "--latency-baseline") is None
    assert night_table.night_name("/x/n12.json.gz") == "n12" and night_table.night_name("n3.json") == "n3"


def test_a_file_that_is_not_a_results_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "bench.json", {"benchmarks": []})
    with pytest.raises(SystemExit, match=re.escape("not a --suite-results file")):
        night_table.main([path])


def test_a_group_of_cases_that_failed_is_counted_beside_the_cases(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    night = _night([1.02, 2.04, 0.10, 0.20], ["passed"] * 4, verdict="failed", command="--latency-baseline=last:3")
    night["verdict"]["states"]["latency group cuda/device/torch"] = "failed"
    night["verdict"]["states"]["latency group cuda/host/torch"] = "passed"  # not a regression: not counted
    assert night_table.main([_write(tmp_path, "n4.json", night)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| n4"))
    assert "| 0 + 1 group(s) |" in row
    assert night_table.night_row("n4", night)["group_regressions"] == 1
