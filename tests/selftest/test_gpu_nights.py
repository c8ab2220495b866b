"""tools/gpu_sitting.sh nights: a sequence of whole-tier nights, each gated as the nightly workflow gates it (issue 42),
run as it is with stand-ins for the interpreter's pytest and for nvidia-smi (a folder of them ahead of PATH): which
baselines each night gets, which nights are kept, what comes back under $OUT, and a later call continuing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.selftest.suite_runs import ROOT

pytestmark = pytest.mark.selftest

SITTING = ROOT / "tools" / "gpu_sitting.sh"

#: The interpreter's stand-in: ``-m pytest`` is recorded (argv and CUDA_VISIBLE_DEVICES, one JSON line each) and
#: leaves what the suite would (a saved run in the storage, the benchmark JSON, the results), exiting with the next
#: code of EXITS_FILE; anything else (the script's own snippets, tools/night_table.py) runs in the real interpreter.
STAND_IN = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
if args[:2] != ["-m", "pytest"]:
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
def value(name):
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None
with open(os.environ["ARGV_FILE"], "a") as f:
    f.write(json.dumps({{"argv": args, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}}) + "\\n")
exits = Path(os.environ["EXITS_FILE"])
codes = exits.read_text().split()
code, rest = int(codes[0]), codes[1:]
exits.write_text(" ".join(rest))
folder = Path(value("--benchmark-storage").removeprefix("file://")) / "Linux-CPython-3.11-64bit"
folder.mkdir(parents=True, exist_ok=True)
number = max((int(p.name[:4]) for p in folder.glob("[0-9]*_*.json")), default=0) + 1
saved = {{"benchmarks": [], "suite": {{"complete": True}}, "machine_info": {{}}}}
(folder / f"{{number:04d}}_{{value('--benchmark-save')}}.json").write_text(json.dumps(saved))
Path(value("--benchmark-json")).write_text(json.dumps(saved))
results = Path(value("--suite-results"))
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
record = {{"kind": "latency", "cell": "a-torch-fp16", "shape": "bs1", "path": "graph", "median_ms": 1.0 + number / 100,
          "bound": "device"}}
state = "failed" if code else "passed"
test = "tests/latency/test_latency.py::test_latency[a-torch-fp16-bs1-graph]"
results.write_text(json.dumps({{
    "complete": True, "source": results.name, "records": [record],
    "verdict": {{"verdict": state, "states": {{test: state}}}},
    "environment": {{"worker_count": len(gpus.split(",")), "worker_gpus": gpus}},
    "run": {{"wall_s": 1.0, "command": " ".join(args)}}}}))
print("VERDICT:", state.upper())
sys.exit(code)
"""


class Sitting:
    """The nights part on a fake machine: its state, storage and $OUT under ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        python = self.bin / "python"
        python.write_text(STAND_IN)
        smi = self.bin / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 570.00, 143771 MiB'\n")
        for path in (python, smi):
            path.chmod(0o755)
        self.state = tmp / "state"
        self.calls: list[dict[str, Any]] = []

    def run(self, nights: str, exits: list[int], **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        """One device call: NIGHTS=``nights``, pytest exiting with ``exits`` in turn. Returns it and its $OUT."""
        out = self.tmp / f"out{len(list(self.tmp.glob('out*')))}"
        argv = self.tmp / "argv.jsonl"
        argv.write_text("")
        (self.tmp / "exits").write_text(" ".join(map(str, exits)))
        child = {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
                 "PYTHON": str(self.bin / "python"), "OUT": str(out), "ENGINE_CACHE": str(self.tmp / "ec"),
                 "BENCH": str(self.tmp / "bench"), "NIGHTS_STATE": str(self.state), "NIGHTS": nights,
                 "ARGV_FILE": str(argv), "EXITS_FILE": str(self.tmp / "exits"), "PYTHONDONTWRITEBYTECODE": "1", **env}
        done = subprocess.run(["bash", str(SITTING), "nights"], env=child, capture_output=True, text=True,
                              timeout=300)
        self.calls = [json.loads(line) for line in argv.read_text().splitlines()]
        return done, out

    def kept(self) -> list[str]:
        return sorted(p.name for p in (self.state / "kept" / "benchmarks").glob("*/*.json"))

    def kept_results(self) -> str:
        return str(json.loads((self.state / "kept" / "results.json").read_text())["source"])


def _options(call: dict[str, Any], prefix: str) -> list[str]:
    return [a for a in call["argv"] if a.startswith(prefix)]


def test_nights_are_gated_as_the_workflow_gates_them_and_only_passing_untagged_nights_are_kept(tmp_path: Path) -> None:
    sitting = Sitting(tmp_path)
    done, out = sitting.run("1 2 2", exits=[0, 0, 1])
    log = done.stdout + done.stderr
    assert done.returncode == 1, log  # a night that did not pass
    n1, n2, n3 = sitting.calls
    assert [c["cuda_visible_devices"] for c in sitting.calls] == ["0", "0,1", "0,1"], log
    for call in sitting.calls:  # the nightly's command: the whole tier, one worker per GPU, saved and written
        argv = call["argv"]
        assert argv[argv.index("-n") + 1] == "auto" and argv[argv.index("--device") + 1] == "cuda", argv
        assert argv[argv.index("--benchmark-save") + 1] == "nightly" and "--benchmark-json" in argv, argv
        assert "--suite-results" in argv and "--suite-config" in argv, argv
        assert "--accept-not-judged=unsupported,no-data,inconclusive,no-baseline" in argv, argv
    # night 1: nothing kept, no baseline at all
    assert not _options(n1, "--latency-baseline") and not _options(n1, "--accuracy-baseline"), n1
    # night 2: one kept night: the accuracy baseline, no latency gate yet (LATENCY_MIN_RUNS 2)
    kept_results = str(tmp_path / "state" / "kept" / "results.json")
    assert _options(n2, "--accuracy-baseline") == [f"--accuracy-baseline={kept_results}"], n2
    assert not _options(n2, "--latency-baseline"), n2
    # night 3: two kept nights: last:2 (the runs the workflow's last:5 finds)
    assert _options(n3, "--latency-baseline") == ["--latency-baseline=last:2"], n3
    assert _options(n3, "--accuracy-baseline") == [f"--accuracy-baseline={kept_results}"], n3
    # n3 failed: not kept, the baselines stay n1's and n2's
    assert sitting.kept() == ["0001_nightly.json", "0002_nightly.json"] and sitting.kept_results() == "n2.json", log
    assert "== n3: pytest exit 1" in log and "not kept: the run did not pass (exit 1)" in log, log
    # what comes back: per night its log's tail and one tar; gpu.txt and cpu.txt inside; the table; <= 8 files
    names = sorted(p.name for p in out.iterdir())
    assert names == ["n1.tail.txt", "n1.tar.gz", "n2.tail.txt", "n2.tar.gz", "n3.tail.txt", "n3.tar.gz", "nights.md"]
    with tarfile.open(out / "n2.tar.gz") as tar:
        inside = sorted(Path(n).name for n in tar.getnames() if Path(n).name)
    assert {"n2.log", "n2.json", "n2-benchmark.json", "n2-smi.csv", "n2-notes.txt", "gpu.txt", "cpu.txt",
            "history.tsv"} <= set(inside) and not [n for n in inside if n.startswith("n1")], inside
    assert "VERDICT: PASSED" in (out / "n2.tail.txt").read_text()
    table = (out / "nights.md").read_text()
    assert "| n3 | 2 (0,1) | last:2 + accuracy |" in table and "| n1 | 1 (0) | none |" in table, table

    # a later device call continues the sequence: numbering, kept nights and all
    done, out = sitting.run("1:inject 1", exits=[0, 0], NIGHT_EXTRA_inject="--inject-slowdown 10%")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    n4, n5 = sitting.calls
    assert n4["argv"][-2:] == ["--inject-slowdown", "10%"] and n4["cuda_visible_devices"] == "0", n4
    assert _options(n4, "--latency-baseline") == ["--latency-baseline=last:2"], n4
    assert "not kept: a night tagged inject is never kept" in log, log  # it passed, and still is not kept
    assert _options(n5, "--latency-baseline") == ["--latency-baseline=last:2"] and "--inject-slowdown" not in n5["argv"]
    assert sitting.kept() == ["0001_nightly.json", "0002_nightly.json", "0003_nightly.json"], log
    assert sitting.kept_results() == "n5.json"
    assert sorted(p.name for p in out.iterdir()) == ["n4.tail.txt", "n4.tar.gz", "n5.tail.txt", "n5.tar.gz",
                                                     "nights.md"]
    table = (out / "nights.md").read_text()
    assert [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| n")][1:] == [
        "n1", "n2", "n3", "n4", "n5"], table  # every night so far, in order


def test_a_tag_without_its_options_or_a_bad_entry_stops_before_any_night(tmp_path: Path) -> None:
    sitting = Sitting(tmp_path)
    done, _ = sitting.run("1 2:inject", exits=[0, 0])
    assert done.returncode == 2 and "set NIGHT_EXTRA_inject" in done.stdout and not sitting.calls, done.stdout
    done, _ = sitting.run("1 two", exits=[0, 0])
    assert done.returncode == 2 and "bad entry 'two'" in done.stdout and not sitting.calls, done.stdout
