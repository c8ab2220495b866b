"""One worker per GPU, a cell's tests on one worker, one result from many workers (suite/fleet/).

The GPU side (binding, one worker per visible GPU) is exercised on the GPU machine; here, on CPU, the
same machinery: ``-n 2`` over the tiny config must leave one --suite-results file, one pytest-benchmark
JSON that a later run takes as its baseline, one HTML report with every cell, one ``engine cache:`` line
adding up both workers, and every cell's tests on a single worker.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from suite import device
from suite.fleet import benchmark_files, scheduling, timeline, workers
from suite.verdict import EXIT_NOT_JUDGED
from tests.selftest.fake_options import options_stash
from tests.selftest.suite_runs import ROOT, explain, run_suite

pytestmark = pytest.mark.selftest

TESTS = (str(ROOT / "tests" / "latency" / "test_latency.py"), str(ROOT / "tests" / "accuracy"),
         str(ROOT / "tests" / "parity"))


def test_workers_never_share_a_gpu() -> None:
    assert workers.check_workers("cuda", 2, gpus=2) is None
    assert workers.check_workers("cuda", "auto", gpus=4) is None
    assert "only 2 GPU(s) are visible" in str(workers.check_workers("cuda", 3, gpus=2))
    assert "every worker would time on the same GPU" in str(workers.check_workers("cuda:1", 2, gpus=2))
    assert workers.check_workers("cuda:1", 1, gpus=2) is None
    assert workers.check_workers("cpu", 2, gpus=0) is None


def test_n_auto_means_one_worker_per_gpu() -> None:
    """xdist resolves ``-n auto`` in pytest_cmdline_main, before configure: the hook must be a module-level one
    of a plugin loaded at start (an H100 run once got 16 workers, one per CPU, and a usage error)."""
    import suite.plugin

    assert callable(getattr(suite.plugin, "pytest_xdist_auto_num_workers", None))
    assert workers.auto_workers("cuda", lambda: 2) == 2
    assert workers.auto_workers("cuda", lambda: 1) == 1
    assert workers.auto_workers("cuda:1", lambda: 8) == 1
    assert workers.auto_workers("cpu", lambda: 8) is None

    def no_gpu() -> int:
        raise RuntimeError("no CUDA")

    assert workers.auto_workers("cuda", no_gpu) is None  # xdist's choice; configure then names the device problem


def test_a_worker_binds_to_its_own_gpu_before_cuda_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(device.WORKER_GPUS_ENV, "3,5")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert device.bind_worker_gpu() == "5"
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    with pytest.raises(RuntimeError, match="gw2 has no GPU of its own"):
        device.bind_worker_gpu()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert workers.visible_gpus(2) == ["0", "1"]



def test_the_plugin_binds_a_worker_before_anything_imports_torch() -> None:
    """suite/device.py binds a worker's GPU, and suite/fleet/workers.py its cores and thread caps, when imported: torch
    must come after both (CUDA and its thread pools start from what they set). suite/plugin.py, the plugin loaded
    first, imports them before anything imports torch; since the binding left suite/options.py (issue 45) that rests
    on its own imports' order, which a later move could change without any other test noticing."""
    code = ("import sys\n"
            "order = []\n"
            "class Seen:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        order.append(name)\n"
            "sys.meta_path.insert(0, Seen())\n"
            "import suite.plugin\n"
            "print(*(order.index(m) for m in ('suite.device', 'suite.fleet.workers', 'torch')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    gpu, cores, torch = map(int, done.stdout.split())
    assert gpu < torch and cores < torch, f"imported at {gpu} (GPU), {cores} (cores), torch at {torch}"

def test_phases_take_engine_builds_out_of_the_tests_that_triggered_them() -> None:
    clock = timeline.PhaseClock()
    clock.add("latency", 10.0, 4.0, "m")
    clock.add("accuracy/parity", 3.0, 0.0, "m")
    assert clock.seconds == {"building": 4.0, "accuracy/parity": 3.0, "latency": 6.0, "other": 0.0}
    assert clock.per_unit == {"m": 9.0}  # seconds per unit of work (a cell), builds left out: the next run's costs


def test_two_workers_leave_one_result_of_every_kind(tmp_path: Path) -> None:
    results, report = tmp_path / "results.json", tmp_path / "report.html"
    done = run_suite(tmp_path, "-n", "2", "--benchmark-save", "fleet", "--suite-results", str(results),
                     "--html", str(report), "--self-contained-html", "--latency-rounds", "12",
                     "--accept-not-judged", "no-data,no-baseline", tests=TESTS)  # it saves the first baseline
    assert done.returncode == 0, explain(done)
    data = json.loads(results.read_text())
    assert data["complete"] and data["run"]["workers"] == 2, data["run"]
    by_cell: dict[str, set[str]] = {}
    for record in data["records"]:
        by_cell.setdefault(record["cell"], set()).add(record["worker"])
    assert set(by_cell) == {"tiny-torch-fp32", "tiny-onnxruntime-fp32", "steady-torch-fp32"}, by_cell
    assert all(len(w) == 1 for w in by_cell.values()), by_cell  # a cell's tests on one worker, its engine once
    assert set().union(*by_cell.values()) == {"gw0", "gw1"}, by_cell  # both workers worked
    assert set(data["run"]["worker_cpus"]) == {"gw0", "gw1"}, data["run"]  # each with its share of the cores
    assert "worker CPU shares: gw0 " in done.stdout, explain(done)
    assert set(data["engines"]) == {"tiny-torch-fp32", "tiny-onnxruntime-fp32", "steady-torch-fp32"}
    saved = list((tmp_path / "benchmarks").rglob("*_fleet.json"))
    assert len(saved) == 1, saved
    benchmarks = json.loads(saved[0].read_text())["benchmarks"]
    assert len(benchmarks) == 6 and all(b["extra_info"]["samples_s"] for b in benchmarks)
    # how the run was spread (issue 42 item 5), the same in the results and the saved run: two workers, no GPU here,
    # each worker's cores as it reported them
    for environment in (data["environment"], json.loads(saved[0].read_text())["machine_info"]["suite_environment"]):
        assert environment["worker_count"] == 2 and environment["worker_gpus"] == "none", environment
        assert re.fullmatch(r"gw0 \d+ cores? \(.+\); gw1 \d+ cores? \(.+\)", environment["worker_cores"]), environment
    html = report.read_text()
    for cell in data["engines"]:
        assert f'data-cell="{cell}' in html, cell
    out = done.stdout
    assert "engine cache: " in out and "time per phase: " in out and "summed over 2 workers" in out, explain(done)
    milestones = data["run"]["milestones"]  # where the time outside the workers' spans went, in order
    assert list(milestones.values()) == sorted(milestones.values()), milestones
    for name in ("gw0 up", "gw1 up", "gw0 collected", "gw1 collected", "start-up check done", "first test started",
                 "last test ended", "gw0 down", "gw1 down", "session finishing", "run ended"):
        assert name in milestones, (name, milestones)
    assert milestones["start-up check done"] <= milestones["first test started"] <= milestones["last test ended"]
    for worker in ("gw0", "gw1"):  # each worker's own clock: started and collected before the controller heard
        assert (milestones[f"{worker} started (own clock)"] <= milestones[f"{worker} collected (own clock)"]
                <= milestones[f"{worker} collected"]), milestones
    assert abs(milestones["run ended"] - data["run"]["wall_s"]) < 0.1, data["run"]
    assert "outside the tests: " in out, explain(done)
    warm = data["run"]["warm_up"]  # each worker's host lane: tiny's data set and both models, until its first test
    assert set(warm) == {"gw0", "gw1"} and "host: " in out, (warm, explain(done))
    for summary in warm.values():
        assert len(summary["host"]) + summary["host_left"] == 3 and not summary.get("errors"), summary
    durations = json.loads((tmp_path / "cache" / scheduling.DURATIONS_FILE).read_text())
    assert set(durations) == {"tiny-torch-fp32", "tiny-onnxruntime-fp32", "steady-torch-fp32"}  # per unit: a cell

    # Accuracy and parity gated under xdist: each record compared once (not once per worker and again).
    results_gated = run_suite(tmp_path, "-n", "2", "--accuracy-baseline", str(results), "--accept-not-judged",
                              "no-data", tests=TESTS[1:])
    assert results_gated.returncode == 0, explain(results_gated)
    line = next(x for x in results_gated.stdout.splitlines() if x.startswith("accuracy gate: gated"))
    # 2 accuracy + 5 parity + the ONNX Runtime cell's parity at every engine batch (one case, a record per batch)
    assert line.startswith("accuracy gate: gated 8 of 8 cases; 0 without baseline; 0 baseline cases absent"), \
        explain(results_gated)

    # The merged JSON is a baseline like any other: a single-process run loads it and compares every case with
    # it. (Whether those comparisons can be judged is the busy guard's business: two workers sharing this
    # machine's two cores saved every case busy, which the run then says; it does not say 'no baseline'.)
    gated = run_suite(tmp_path, "--models", "steady", "--latency-baseline", str(saved[0]), "--latency-rounds", "12",
                      tests=TESTS[:1])
    assert gated.returncode in (0, 1, EXIT_NOT_JUDGED), explain(gated)
    assert "latency gate coverage: 2 of 2 cases have a baseline; 0 without baseline; 4 baseline cases absent" \
        in gated.stdout, explain(gated)
    # one process against two workers' run: the spread differs, a warning, named at the run's end
    assert re.search(r"^  worker_count +2  ->  1$", gated.stdout, flags=re.M), explain(gated)
    assert "WARNING: latency baseline from a DIFFERENT ENVIRONMENT" in gated.stdout, explain(gated)
    counts = re.search(r"^cases: (.*)$", gated.stdout, flags=re.M)
    assert counts and "no-baseline" not in counts.group(1) and sum(
        int(part.split()[0]) for part in counts.group(1).split(", ")) == 2, explain(gated)


def test_a_worker_knows_the_runs_spread_and_a_regression_names_a_baseline_spread_otherwise(tmp_path: Path) -> None:
    """Issue 47 item 3: a run with two workers against a baseline saved in one process was failed with '+150 %'
    regressions whose messages said nothing of the spread. The latency gate in each worker now knows the run's worker
    count (fleet.worker_layout), so each regression says the baseline was spread otherwise, beside the run's
    'what differs' block."""
    from types import SimpleNamespace

    from suite.fleet import plugin as fleet

    worker = SimpleNamespace(workerinput={"workercount": 3}, stash=options_stash(),
                             pluginmanager=SimpleNamespace(get_plugin=lambda name: None))
    assert fleet.worker_layout(worker) == {"worker_count": 3, "worker_gpus": "none"}  # type: ignore[arg-type]
    latency = (TESTS[0], "--models", "steady", "--latency-rounds", "20")
    saved = run_suite(tmp_path, *latency[1:], "--benchmark-autosave", tests=latency[:1])
    assert saved.returncode == EXIT_NOT_JUDGED, explain(saved)
    done = run_suite(tmp_path, *latency[1:], "-n", "2", "--latency-baseline", "0001", "--inject-slowdown", "100%",
                     "--latency-busy-limit", "100%", tests=latency[:1], env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, explain(done)
    # Each regression says so (both cases regress on a quiet machine; a busy one may leave one inconclusive).
    regressions = re.findall(r"^steady-torch-fp32-bs\d-all: latency regression", done.stdout, flags=re.M)
    note = "NOTE: the baseline comes from a different environment (worker_count: 1 -> 2"
    assert regressions and done.stdout.count(note) == len(regressions), explain(done)
    assert re.search(r"^  worker_count +1  ->  2$", done.stdout, flags=re.M), explain(done)


def test_rebuild_check_builds_each_engine_anew_and_compares(tmp_path: Path) -> None:
    """--rebuild-check 2 on the tiny config: ONNX Runtime's engine is exported twice from scratch; without the
    option the rebuild tests are deselected, not skipped (a skip would be 'not judged')."""
    parity = (str(ROOT / "tests" / "parity" / "test_rebuild.py"),)
    # --engines onnxruntime: the run checks that engine alone, and says so (a required engine left out in the open)
    done = run_suite(tmp_path, "--models", "tiny", "--engines", "onnxruntime", "--rebuild-check", "2",
                     "--suite-results", str(tmp_path / "r.json"), tests=parity)
    assert done.returncode == 0, explain(done)
    assert "tiny-onnxruntime-fp32: 2 builds; artifacts " in done.stdout, explain(done)
    record = next(r for r in json.loads((tmp_path / "r.json").read_text())["records"] if r["kind"] == "rebuild")
    assert record["builds"] == 2 and len(record["per_build"]) == 2 and record["identical_outputs"] is not None
    plain = run_suite(tmp_path, "--models", "tiny", tests=parity)
    assert plain.returncode == 5 and "1 deselected" in plain.stdout, explain(plain)  # nothing collected: pytest's 5


def test_pytest_benchmark_files_are_written_whole_or_not_at_all(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-benchmark writes its JSON and storage entries with a plain open(); a run killed mid-write left a
    truncated file that broke ``latest`` and ``last:K``. Through atomic_benchmark_files a failed write leaves
    nothing (or the old file), and a finished one leaves the whole document."""
    from types import SimpleNamespace

    from pytest_benchmark.storage.file import FileStorage

    messages: list[str] = []
    logger = SimpleNamespace(info=lambda text, **_: messages.append(text))
    bench = SimpleNamespace(json=str(tmp_path / "bench.json"), storage=FileStorage(tmp_path / "store", logger, "m"),
                            logger=logger, save_json=None)
    config = SimpleNamespace(_benchmarksession=bench, stash={})
    benchmark_files.atomic_benchmark_files(config)  # type: ignore[arg-type]
    (tmp_path / "bench.json").write_text('{"old": true}')

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("killed mid-write (simulated)")

    monkeypatch.setattr("os.replace", broken_replace)
    # a failed write is recorded, one line and a failed check (suite/hooks/verdict_wiring.py)
    bench.save_json({"benchmarks": [1]})
    bench.storage.save({"benchmarks": [1]}, "x")
    assert [(what, str(error)) for what, _, error in benchmark_files.unwritten_benchmark_files(config)] == [  # type: ignore[arg-type]
        ("--benchmark-json", "killed mid-write (simulated)"),
        ("pytest-benchmark's storage entry", "killed mid-write (simulated)")]
    assert json.loads((tmp_path / "bench.json").read_text()) == {"old": True}
    assert not list((tmp_path / "store").rglob("*.json")) and not list(tmp_path.rglob("*.tmp"))
    monkeypatch.undo()
    bench.save_json({"benchmarks": [2]})
    bench.storage.save({"benchmarks": [2]}, "x")
    assert json.loads((tmp_path / "bench.json").read_text()) == {"benchmarks": [2]}
    assert [json.loads(p.read_text()) for p in (tmp_path / "store").rglob("0001_x.json")] == [{"benchmarks": [2]}]
