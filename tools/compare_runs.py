"""Two runs of the same tier side by side (``--suite-results`` files): are they the same night?

What the multi-GPU target asks of a run on N GPUs against the run on one (issue 22): the same cases, the same
verdict for each, device-bound latency medians within a tolerance, and the wall time as a fraction of the
one-GPU run's. Also each run's peak GPU memory, per model and for the run (suite/gpu_memory.py).

    python tools/compare_runs.py one-gpu.json two-gpu.json [--again two-gpu-again.json]
                                 [--base-again one-gpu-again.json] [--tolerance 0.02] [--json out.json]

``--again`` is a second run made exactly like ``other`` (an A/A pair): how far the same device-bound medians move
between two identical runs, beside how far they moved between the two configurations. A sub-millisecond CUDA-graph
replay can move more than 2 % between processes (2 x H200, docs/gpu.md); the A/A line says whether a difference is
the configuration's or any two processes'. Also printed: the median ratio other/base of each path and bound (where
the time went: device-bound cases should read 1.00, host-bound ones show the host's contention).

``--base-again`` is a second run made exactly like ``base``, best made last (one GPU, two, two again, one again):
the host of a GPU VM drifts within a sitting (2 x H200, 2026-11-27: host-bound medians 1.25x slower in one one-GPU
run than in the last sitting's, the two-GPU runs 1.08x), and a ratio against one slow or fast one-GPU run reads
that drift as scaling. It prints the wall ratio against each one-GPU run and against their mean, and how far the
host-bound medians moved between the two one-GPU runs.

The growth lines say where a run with more workers spent more test time than the base: the summed seconds of
every test phase by model, by test function and by cell (the schedule's unit, with the worker(s) that ran it: a cell
moved to a worker that had not run its model pays the model's first calls again), largest change first, and the
ratio the run would have made with none of that growth (the base's test time split evenly over its workers, plus
its own time outside the tests).
On two H200s the summed test time grew 9-12 % with two workers (docs/gpu.md): that growth, not the split, is what
stands between the floor and the measured ratio.

Exit status: 0 when cases and verdicts are identical and every device-bound median agrees within the
tolerance, 1 otherwise (the differences are listed, with their A/A change where given), 2 on unusable input.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from metrics.latency import two_modes  # noqa: E402
from suite.fleet.timeline import set_up_seconds  # noqa: E402
from suite.gpu_memory import peaks  # noqa: E402
from suite.lifetime import model_of_nodeid, unit_of_nodeid  # noqa: E402


def load(path: str) -> dict[str, Any]:
    """A --suite-results file, or the same gzipped (``*.json.gz``, as the sittings kept them; docs/results)."""
    raw = Path(path).read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if not isinstance(data, dict) or "records" not in data or "verdict" not in data:
        raise SystemExit(f"{path}: not a --suite-results file of this suite (records and verdict)")
    return data


def checks(data: dict[str, Any]) -> dict[str, str]:
    """test id -> state (passed, failed, not judged (reason))."""
    states = data["verdict"].get("states")
    if states is None:
        raise SystemExit("a results file from before the verdict listed every check's state: run it again")
    return {str(k): str(v) for k, v in states.items()}


def medians(data: dict[str, Any]) -> dict[tuple[str, str, str], tuple[float, str]]:
    """(cell, shape, path) -> (median ms, bound) of every latency record."""
    return {(str(r["cell"]), str(r.get("shape")), str(r.get("path"))): (float(r["median_ms"]), str(r.get("bound")))
            for r in data["records"] if r.get("kind") == "latency" and r.get("median_ms") is not None}


Case = tuple[str, str, str]


def two_mode_cases(data: dict[str, Any]) -> dict[Case, str]:
    """(cell, shape, path) -> what its rounds did, for every latency record whose rounds fell in two modes
    (metrics.latency.two_modes): a change of such a case's median is the modes' mix, not a speed change."""
    out = {}
    for r in data["records"]:
        modes = two_modes(r.get("samples_s") or []) if r.get("kind") == "latency" else None
        if modes is not None:
            out[(str(r["cell"]), str(r.get("shape")), str(r.get("path")))] = modes.explain()
    return out


def device_changes(base: dict[str, Any], other: dict[str, Any]) -> dict[Case, tuple[float, float, float]]:
    """(cell, shape, path) -> (base median, other median, relative change) of every case device-bound in both."""
    ma, mb = medians(base), medians(other)
    return {k: (ma[k][0], mb[k][0], mb[k][0] / ma[k][0] - 1.0) for k in sorted(set(ma) & set(mb))
            if ma[k][1] == "device" and mb[k][1] == "device" and ma[k][0] > 0}


def ratios_by_class(base: dict[str, Any], other: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """"path, bound (in other)" -> (cases, median of other/base medians): where a slower run's time went."""
    ma, mb = medians(base), medians(other)
    groups: dict[str, list[float]] = {}
    for k in sorted(set(ma) & set(mb)):
        if ma[k][0] > 0:
            groups.setdefault(f"{k[2]}, {mb[k][1]}-bound", []).append(mb[k][0] / ma[k][0])
    return {name: (len(values), statistics.median(values)) for name, values in sorted(groups.items())}


def _wall(data: dict[str, Any]) -> float | None:
    return data.get("run", {}).get("wall_s")


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def compare(base: dict[str, Any], other: dict[str, Any], tolerance: float,
            again: dict[str, Any] | None = None, base_again: dict[str, Any] | None = None) -> dict[str, Any]:
    a, b = checks(base), checks(other)
    verdicts = {k: (a[k], b[k]) for k in sorted(set(a) & set(b)) if a[k] != b[k]}
    device = device_changes(base, other)
    beyond = {k: v for k, v in device.items() if abs(v[2]) > tolerance}
    modes = {side: two_mode_cases(data) for side, data in (("base", base), ("other", other))}
    repeat = device_changes(other, again) if again is not None else {}
    aa = None
    if again is not None:
        aa = {"cases": len(repeat), "beyond_tolerance": sum(abs(v[2]) > tolerance for v in repeat.values()),
              "largest_change": max((abs(v[2]) for v in repeat.values()), default=None),
              "of_those_beyond": {" ".join(k): repeat[k][2] for k in beyond if k in repeat},
              "wall_s": _wall(again)}
    wall_a, wall_b = _wall(base), _wall(other)
    bb = None
    if base_again is not None:
        wall_a2 = _wall(base_again)
        mean = (wall_a + wall_a2) / 2 if wall_a and wall_a2 else None
        wall_c = aa["wall_s"] if aa else None  # both configurations made twice (ABBA): each other run against the mean
        bb = {"wall_s": wall_a2, "median_ratio_by_class": ratios_by_class(base, base_again),
              "wall_ratio": _ratio(wall_b, wall_a2), "wall_ratio_to_mean": _ratio(wall_b, mean),
              "again_ratio_to_mean": _ratio(wall_c, mean),
              "others_mean_ratio_to_mean": _ratio((wall_b + wall_c) / 2 if wall_b and wall_c else None, mean)}
    totals = (test_seconds(base), test_seconds(other))
    memory = {}
    for name, data in (("base", base), ("other", other)):
        by_model, _ = peaks(data["records"])
        memory[name] = {"run_peak_mib": max(by_model.values(), default=None), "per_model_mib": by_model}
    return {
        "cases": {"base": len(a), "other": len(b), "only_base": sorted(set(a) - set(b)),
                  "only_other": sorted(set(b) - set(a))},
        "verdicts_differ": verdicts,
        "run_verdicts": (base["verdict"].get("verdict"), other["verdict"].get("verdict")),
        "device_bound_cases": len(device),
        "device_bound_beyond_tolerance": {" ".join(k): v for k, v in beyond.items()},
        "beyond_in_two_modes": {" ".join(k): {side: modes[side][k] for side in modes if k in modes[side]}
                                for k in beyond if any(k in m for m in modes.values())},
        "largest_device_bound_change": max((abs(v[2]) for v in device.values()), default=None),
        "a_a": aa,
        "base_again": bb,
        "median_ratio_by_class": ratios_by_class(base, other),
        "set_up_s": (set_up_seconds(base["records"]), set_up_seconds(other["records"])),
        "wall_s": (wall_a, wall_b), "wall_ratio": _ratio(wall_b, wall_a),
        "workers": (base.get("run", {}).get("workers"), other.get("run", {}).get("workers")),
        "memory": memory,
        "worker_time": (base.get("run", {}).get("worker_time"), other.get("run", {}).get("worker_time")),
        "test_seconds": totals,
        "growth": growth(base, other, totals),
    }


#: How many cells the growth lines name, largest change first.
CELLS_SHOWN = 8


def test_seconds(data: dict[str, Any]) -> float | None:
    """Every test phase's seconds (setup, call, teardown) over all workers: more in the run with more workers is
    work done twice (a model's module and reference made in each worker that touches it)."""
    rows = data.get("run", {}).get("test_times")
    return round(sum(r[4] for r in rows), 1) if rows else None


def seconds_by(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Every test phase's seconds summed by model ("model"), by test function ("test") and by the schedule's unit of
    work ("cell": suite.lifetime.unit_of_nodeid), over all workers."""
    rows = data.get("run", {}).get("test_times") or []
    models, unit = _models(data), _unit_of(data)
    sums: dict[str, dict[str, float]] = {"model": {}, "test": {}, "cell": {}}
    for nodeid, _worker, _phase, _start, seconds in rows:
        for kind, key in (("model", model_of_nodeid(nodeid, models) or "(no model)"),
                          ("test", nodeid.partition("[")[0].rpartition("::")[2]),
                          ("cell", unit(nodeid))):
            sums[kind][key] = sums[kind].get(key, 0.0) + seconds
    return sums


def workers_by_cell(data: dict[str, Any]) -> dict[str, str]:
    """Which worker(s) ran each unit of work: a cell the schedule split, or moved to a worker that had not run its
    model (it pays the model's first calls again there), reads at a glance."""
    unit, ran = _unit_of(data), dict[str, set[str]]()
    for nodeid, worker, *_ in data.get("run", {}).get("test_times") or []:
        ran.setdefault(unit(nodeid), set()).add(str(worker))
    return {cell: "+".join(sorted(workers)) for cell, workers in ran.items()}


def _models(data: dict[str, Any]) -> list[str]:
    return sorted({str(r["model"]) for r in data["records"] if r.get("model")})


def _unit_of(data: dict[str, Any]) -> Callable[[str], str]:
    """nodeid -> its unit of work in this run (its cell; its model for a test of no cell; "(no model)")."""
    models = _models(data)
    engines = {str(r["engine"]) for r in data["records"] if r.get("engine")}
    precisions = {str(r["precision"]) for r in data["records"] if r.get("precision")}
    return lambda nodeid: unit_of_nodeid(nodeid, models, engines, precisions) or "(no model)"


def growth(base: dict[str, Any], other: dict[str, Any],
           totals: tuple[float | None, float | None]) -> dict[str, Any] | None:
    """How much more test time ``other`` spent than ``base`` (``totals``: each one's test_seconds), by model, by
    test function and by cell (largest change first; with ``other``'s worker(s) of each cell), and the wall ratio
    ``other`` would have made with no growth: the base's summed test time over ``other``'s workers, plus
    ``other``'s own time outside the tests (its wall less its longest worker span)."""
    total_a, total_b = totals
    if total_a is None or total_b is None:
        return None
    a, b = seconds_by(base), seconds_by(other)
    by = {kind: dict(sorted(((k, (round(a[kind].get(k, 0.0), 1), round(b[kind].get(k, 0.0), 1)))
                             for k in set(a[kind]) | set(b[kind])),
                            key=lambda kv: -abs(kv[1][1] - kv[1][0])))
          for kind in ("model", "test", "cell")}
    run_b = other.get("run", {})
    spans = [t["span_s"] for t in (run_b.get("worker_time") or {}).values()]
    wall_a, wall_b, workers = _wall(base), _wall(other), run_b.get("workers")
    floor = None
    if wall_a and wall_b and spans and workers:
        floor = (total_a / workers + max(0.0, wall_b - max(spans))) / wall_a
    return {"test_seconds": (total_a, total_b), "by_model": by["model"], "by_test": by["test"],
            "by_cell": by["cell"], "cell_workers": workers_by_cell(other), "ratio_without_growth": floor}


def _growth_text(pairs: dict[str, tuple[float, float]]) -> str:
    return ", ".join(f"{k} {x:.1f} -> {y:.1f} ({y - x:+.1f})" for k, (x, y) in pairs.items())


def _by_class_text(ratios: dict[str, tuple[int, float]]) -> str:
    return "; ".join(f"{name} {ratio:.3f} ({n})" for name, (n, ratio) in ratios.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="--suite-results of the reference run (e.g. one GPU)")
    parser.add_argument("other", help="--suite-results of the run to compare (e.g. two GPUs)")
    parser.add_argument("--again", help="--suite-results of a second run made like OTHER (A/A): how far the same "
                        "device-bound medians move between two identical runs")
    parser.add_argument("--base-again", help="--suite-results of a second run made like BASE, best made last: the "
                        "wall ratio against the mean of the two, and how far the host drifted between them")
    parser.add_argument("--tolerance", type=float, default=0.02,
                        help="largest relative change of a device-bound median that counts as the same (0.02)")
    parser.add_argument("--json", help="also write the comparison to this file")
    args = parser.parse_args(argv)
    result = compare(load(args.base), load(args.other), args.tolerance, load(args.again) if args.again else None,
                     load(args.base_again) if args.base_again else None)
    cases = result["cases"]
    print(f"cases: {cases['base']} and {cases['other']}; only in base {len(cases['only_base'])}, only in other "
          f"{len(cases['only_other'])}")
    for name in cases["only_base"][:20] + cases["only_other"][:20]:
        print(f"  {name}")
    print(f"verdicts: {result['run_verdicts'][0]} and {result['run_verdicts'][1]}; checks that differ: "
          f"{len(result['verdicts_differ'])}")
    for name, (x, y) in list(result["verdicts_differ"].items())[:20]:
        print(f"  {name}: {x} -> {y}")
    largest = result["largest_device_bound_change"]
    print(f"device-bound medians: {result['device_bound_cases']} cases in both, "
          f"{len(result['device_bound_beyond_tolerance'])} beyond {args.tolerance:.0%}"
          + (f"; largest change {largest:.1%}" if largest is not None else ""))
    aa = result["a_a"]
    for name, (x, y, change) in result["device_bound_beyond_tolerance"].items():
        again = aa["of_those_beyond"].get(name) if aa else None
        print(f"  {name}: {x:.3f} -> {y:.3f} ms ({change:+.1%})"
              + (f"; A/A {again:+.1%}" if again is not None else "")
              + "".join(f"; in {side}, {what}" for side, what in result["beyond_in_two_modes"].get(name, {}).items()))
    if aa:
        largest = aa["largest_change"]
        print(f"A/A (other against --again, made alike): {aa['cases']} device-bound cases, {aa['beyond_tolerance']} "
              f"beyond {args.tolerance:.0%}" + (f"; largest change {largest:.1%}" if largest is not None else "")
              + (f"; wall {aa['wall_s']} s" if aa["wall_s"] is not None else ""))
    if result["median_ratio_by_class"]:
        print("median ratio other/base by path and bound: " + _by_class_text(result["median_ratio_by_class"]))
    for name, seconds in zip(("base", "other"), result["set_up_s"], strict=True):
        if seconds:
            print(f"device paths' set-up outside the rounds, {name} (s): "
                  + ", ".join(f"{k} {v}" for k, v in seconds.items()))
    wall, ratio = result["wall_s"], result["wall_ratio"]
    print(f"wall: {wall[0]} s ({result['workers'][0]} worker(s)) and {wall[1]} s ({result['workers'][1]} worker(s))"
          + (f": {ratio:.3f}x" if ratio is not None else ""))
    for name, times, total in zip(("base", "other"), result["worker_time"], result["test_seconds"], strict=True):
        if times:
            print(f"worker time, {name} (span: setup, calls, teardown, idle; s): " + "; ".join(
                f"{w} {t['span_s']}: {t['setup_s']}, {t['call_s']}, {t['teardown_s']}, {t['idle_s']}"
                for w, t in times.items()) + (f"; all test phases {total} s" if total is not None else ""))
    grew = result["growth"]
    if grew:
        (x, y), floor = grew["test_seconds"], grew["ratio_without_growth"]
        print(f"summed test time (every phase, every worker), base -> other: {x} -> {y} s"
              + (f" ({y / x - 1:+.1%})" if x else "")
              + (f"; with none of that growth other would take {floor:.3f}x of base" if floor is not None else ""))
        print(f"  by model (s): {_growth_text(grew['by_model'])}")
        print(f"  by test (s): {_growth_text(grew['by_test'])}")
        cells, ran = dict(list(grew["by_cell"].items())[:CELLS_SHOWN]), grew["cell_workers"]
        print(f"  by cell, the {len(cells)} largest changes (s; other's worker): " + ", ".join(
            f"{k} {x:.1f} -> {y:.1f} ({y - x:+.1f}, {ran.get(k, '-')})" for k, (x, y) in cells.items()))
    for name in ("base", "other"):
        m = result["memory"][name]
        if m["run_peak_mib"] is not None:
            per = ", ".join(f"{k} {v:.0f}" for k, v in sorted(m["per_model_mib"].items(), key=lambda kv: -kv[1]))
            print(f"peak GPU memory, {name}: run {m['run_peak_mib']:.0f} MiB; per model (MiB): {per}")
    bb = result["base_again"]
    if bb:
        print(f"base again (made like base): wall {bb['wall_s']} s"
              + (f"; other against it {bb['wall_ratio']:.3f}x" if bb["wall_ratio"] is not None else "")
              + (f", against the mean of the two {bb['wall_ratio_to_mean']:.3f}x"
                 if bb["wall_ratio_to_mean"] is not None else "")
              + (f"; --again against that mean {bb['again_ratio_to_mean']:.3f}x, the mean of other and --again "
                 f"{bb['others_mean_ratio_to_mean']:.3f}x" if bb["others_mean_ratio_to_mean"] is not None else ""))
        if bb["median_ratio_by_class"]:
            print("median ratio base again/base by path and bound (the host's drift): "
                  + _by_class_text(bb["median_ratio_by_class"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    same = (not cases["only_base"] and not cases["only_other"] and not result["verdicts_differ"]
            and not result["device_bound_beyond_tolerance"])
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
