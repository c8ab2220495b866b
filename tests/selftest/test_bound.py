"""Device- vs host-bound classification of latency cases (suite/gate/bound.py) and the GPU study's analysis
(tools/bound_study.py) on made-up measurements."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from suite.gate.bound import DEVICE, HOST, classify

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]


def _record(path: str, median: float, util: float | None = None, device: str = "cuda:0") -> dict[str, object]:
    return {"kind": "latency", "cell": "m-torch-fp16", "batch_size": 1, "path": path, "device": device,
            "median_ms": median, "gpu": {} if util is None else {"mean_sm_util_pct": util}}


def test_each_path_is_classified_from_what_the_run_measured() -> None:
    graph = _record("graph", 0.9)
    assert classify(graph, [])[0] == DEVICE
    assert classify(_record("all", 5.0), [graph])[0] == HOST
    assert classify(_record("model", 0.92), [graph]) == (DEVICE, "eager 1.02x its CUDA-graph replay (<= 1.05x)")
    # the H100 study: ORT fp16 bs32 eager at 1.09x its replay moved +88 % with every CPU busy
    assert classify(_record("model", 0.98), [graph])[0] == HOST
    bound, why = classify(_record("model", 5.2), [graph])
    assert bound == HOST and "5.78x" in why and "launch-bound" in why
    assert classify(_record("model", 5.2, util=97.0), [])[0] == DEVICE  # no replay: NVML decides
    assert classify(_record("model", 5.2, util=40.0), [])[0] == HOST
    assert classify(_record("model", 5.2), [])[0] == HOST  # nothing to tell: the cautious answer
    assert classify(_record("model", 0.5, device="cpu"), [graph])[0] == HOST


ORT_CLOCK = "host perf_counter around run_with_iobinding (returns after the CUDA stream synchronizes)"


def test_a_replay_timed_on_the_host_is_device_bound_only_where_the_device_time_outweighs_the_host_path() -> None:
    """ONNX Runtime's replays are timed on the host, and ONNX Runtime synchronizes after each: on two H200s, cases
    under 2 ms moved up to 5.9 % between processes, cases from 2 ms up at most 1.8 % (docs/gpu.md)."""
    short = {**_record("graph", 0.8), "clock": ORT_CLOCK}
    bound, why = classify(short, [])
    assert bound == HOST and "timed on the host, 0.8 ms < 2 ms" in why
    assert classify({**_record("graph", 2.5), "clock": ORT_CLOCK}, [])[0] == DEVICE
    assert classify({**_record("graph", 0.05), "clock": "cuda events (torch) around a replay"}, [])[0] == DEVICE
    # an eager case near a host-bound replay proves nothing by the ratio: NVML decides, or the cautious answer
    replay = {**short, "bound": bound}
    assert classify({**_record("model", 0.82), "clock": ORT_CLOCK}, [replay])[0] == HOST
    assert classify({**_record("model", 0.82, util=95.0), "clock": ORT_CLOCK}, [replay])[0] == DEVICE
    assert classify(_record("model", 0.82), [{**_record("graph", 0.8), "bound": DEVICE}])[0] == DEVICE


def test_each_rule_of_the_classification_says_why_at_both_sides_of_its_line() -> None:
    """Every answer of suite.gate.bound.classify with its reason, pinned at its thresholds (a median of exactly 2 ms on
    the host clock, eager exactly 1.05x its replay, NVML exactly 90 %) and one step beyond each."""
    assert classify({"path": "graph", "median_ms": 0.9}, []) == (HOST, "CPU: the host runs the model")  # no device
    assert classify({"path": "graph", "median_ms": 0.9, "device": "cpu"}, []) == (HOST, "CPU: the host runs the model")
    assert classify({"path": "all", "device": "cuda"}, []) == (HOST, "host arrays: copies and Python in every round")
    assert classify(_record("graph", 0.9), []) == (DEVICE, "CUDA graph replay: one launch, the device runs the rest")
    assert classify({**_record("graph", 2), "clock": ORT_CLOCK}, []) == (
        DEVICE, "CUDA graph replay timed on the host, 2 ms >= 2 ms: the device's time outweighs the engine's per-run "
                "host path")
    assert classify({**_record("graph", 1.9994), "clock": ORT_CLOCK}, []) == (
        HOST, "CUDA graph replay timed on the host, 2 ms < 2 ms: the engine's per-run host path (a stream "
              "synchronization every run) is a share of it")
    assert classify({**_record("graph", "12.3456"), "clock": ORT_CLOCK}, [])[1].startswith(
        "CUDA graph replay timed on the host, 12.3 ms >= 2 ms")  # a median read back as text is a number
    graph = _record("graph", 2.0)
    assert classify(_record("model", 2.1), [graph]) == (DEVICE, "eager 1.05x its CUDA-graph replay (<= 1.05x)")
    assert classify(_record("model", "2.1"), [{**graph, "median_ms": "2.0"}])[0] == DEVICE
    assert classify(_record("model", 2.1002), [graph]) == (
        HOST, "eager 1.05x its CUDA-graph replay (> 1.05x): launch-bound")
    assert classify(_record("model", 2.5), [graph]) == (HOST, "eager 1.25x its CUDA-graph replay (> 1.05x): "
                                                              "launch-bound")
    # NVML decides where the run has no replay of the same cell, batch and shape, or only a host-bound one
    util = {"gpu": {"mean_sm_util_pct": 90}}
    assert classify({**_record("model", 5.0), **util}, []) == (DEVICE, "NVML utilisation 90% >= 90% over the case")
    assert classify({**_record("model", 5.0), "gpu": {"mean_sm_util_pct": "89.9"}}, []) == (
        HOST, "NVML utilisation 90% < 90% over the case")
    nothing = (HOST, "no CUDA-graph replay and no NVML figure to tell: counted host-bound")
    assert classify({**_record("model", 5.0), "gpu": None}, []) == nothing
    assert classify({"device": "cuda:1", "median_ms": 5.0}, [graph]) == nothing  # no path: not a replay's eager case
    model = {**_record("model", 5.0), "shape": "s1", **util}
    replay = {**graph, "shape": "s1"}
    assert classify(model, [replay])[0] == HOST  # 2.5x its replay: the replay decides, not NVML
    for other in ({**replay, "kind": "accuracy"}, {**replay, "kind": None}, {**replay, "path": "model"},
                  {**replay, "cell": "other"}, {**replay, "batch_size": 2}, {**replay, "shape": "s2"},
                  {**replay, "bound": HOST}, graph):
        assert classify(model, [other])[1] == "NVML utilisation 90% >= 90% over the case", other
    assert classify(model, [{**replay, "bound": DEVICE}])[0] == HOST
    # the first matching replay decides; the records that do not match are passed over on the way to it
    later = {**replay, "median_ms": 5.0}
    assert classify(model, [{**replay, "cell": "other"}, later, replay]) == (
        DEVICE, "eager 1.00x its CUDA-graph replay (<= 1.05x)")
    assert classify(model, [replay, later])[0] == HOST


def _load_study():
    spec = importlib.util.spec_from_file_location("bound_study", ROOT / "tools" / "bound_study.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_the_study_counts_false_alarms_per_class_and_rule() -> None:
    """A device-bound case steady across processes, a host-bound one whose level follows the launch speed:
    plain single-run comparisons alarm on the host-bound case, the launch control cancels the drift."""
    study = _load_study()
    rng = random.Random(0)
    results = []
    for index, speed in enumerate((1.0, 1.3, 0.8, 1.15, 0.9)):
        device = [0.010 * (1 + rng.gauss(0, 0.002)) for _ in range(60)]
        host = [0.005 * speed * (1 + rng.gauss(0, 0.002)) for _ in range(60)]
        results.append({"index": index, "hogs": 0, "cases": [
            {"cell": "m-torch-fp16", "batch": 256, "path": "graph", "samples_s": device, "median_ms": 10.0 * 1,
             "util_pct": 99.0, "bound": "device", "why": "replay", "host_ms": 1.0, "launch_ms": 2.0},
            {"cell": "m-torch-fp16", "batch": 1, "path": "model", "samples_s": host, "median_ms": 5.0 * speed,
             "util_pct": 30.0, "bound": "host", "why": "eager 5x", "host_ms": 1.0, "launch_ms": 2.0 * speed}]})
    analysis = study.analyse(results)
    device, host = analysis["classes"]["device"], analysis["classes"]["host"]
    assert device["plain"]["alarms"] == 0 and device["plain"]["trials"] == 20
    assert host["plain"]["alarms"] >= 5 and host["launch_control"]["alarms"] == 0
    assert "| host | 1 |" in study.markdown(analysis)


def test_a_host_bound_gpu_case_is_judged_only_with_its_classs_between_night_model() -> None:
    """The class's gate rule (suite.gate.bound.gate_rule): issue 42's four nights on two H200s, where host-bound cases'
    medians moved up to 2.8x between processes: 18 identical cases judged regressions against one night (+62 % to
    +115 %, beyond the old "60 % between quiet processes" rule) and 2 against three. Without its class's model a
    host-bound GPU case's verdict, whichever, is inconclusive; with it, the plain rule on the pooled interval."""
    import numpy as np

    from metrics.regression import compare_latency
    from suite.gate.bound import gate_rule

    rng = np.random.default_rng(0)

    def run(ms: float) -> list[float]:
        return list(ms * 1e-3 * (1 + 0.002 * rng.standard_normal(200)))

    host = {"bound": "host", "bound_why": "eager 5.78x its CUDA-graph replay (> 1.05x): launch-bound",
            "device": "cuda:0"}
    for current in (9.24, 5.5, 4.0):  # +66 % (night 4's false alarm), unchanged, an improvement
        one = compare_latency([run(5.55)], run(current), 0.05, 0.99)
        assert one.verdict != "inconclusive"
        ruled = gate_rule(host, one, modeled=False)
        assert ruled.verdict == "inconclusive" and "against 1 baseline run(s)" in ruled.reason
        assert "no between-night model" in ruled.reason and "launch-bound" in ruled.reason
        assert gate_rule(host, one, modeled=True) is one  # its class has a model: the plain rule
        assert gate_rule({**host, "bound": "device"}, one, modeled=False) is one  # device-bound: the plain rule
        assert gate_rule({**host, "device": "cpu"}, one, modeled=False) is one  # CPU cases: the plain rule


def test_the_host_bound_rule_says_what_it_set_aside_and_leaves_an_inconclusive_comparison_alone() -> None:
    """gate_rule's reason, whole, with the record's own why and without one; a comparison already inconclusive is
    returned as it is (its own reason kept), modeled or not."""
    from dataclasses import replace

    import numpy as np

    from metrics.regression import MIN_POOLED, compare_latency
    from suite.gate.bound import gate_rule

    rng = np.random.default_rng(1)
    one = compare_latency([list(5e-3 * (1 + 0.002 * rng.standard_normal(200)))],
                          list(9e-3 * (1 + 0.002 * rng.standard_normal(200))), 0.05, 0.99)
    assert one.verdict == "regression"
    tail = (f"change against 1 baseline run(s) with no between-night model of its class cannot be told from the "
            f"launch speed of one process; judged once 2 or more kept nights give its class {MIN_POOLED} deviations "
            f"(--latency-baseline last:K; docs/gating.md 'Launch-bound cases')")
    host = {"bound": "host", "device": "cuda:0"}
    ruled = gate_rule(host, one, modeled=False)
    assert ruled.verdict == "inconclusive" and ruled.reason == (
        f"host-bound on the GPU (launch-bound): a {one.change_pct:+.1f}% " + tail)
    assert gate_rule({**host, "bound_why": "eager 5.78x"}, one, modeled=False).reason == (
        f"host-bound on the GPU (eager 5.78x): a {one.change_pct:+.1f}% " + tail)
    assert replace(ruled, verdict=one.verdict, reason=one.reason) == one  # only the verdict and the reason change
    unsure = replace(one, verdict="inconclusive", reason="too few rounds")
    assert gate_rule(host, unsure, modeled=False) is unsure
    assert gate_rule({"bound": "host"}, one, modeled=False) is one  # no device named: not a GPU case


def test_the_between_night_model_is_pooled_by_class_and_falls_back_to_the_coarser_one() -> None:
    """suite.gate.bound.class_noise: every case of a class with 2+ kept nights gives each night's deviation from its
    other nights; a class's half-width is their 99 % quantile; a class of too few cases falls back to (device kind,
    bound)."""
    import math

    from metrics.regression import MIN_POOLED
    from suite.gate.baselines import LatencyBaseline
    from suite.gate.bound import between_half, class_noise

    samples, classes = {}, {}
    for i in range(MIN_POOLED // 2):  # 10 torch eager cases, 2 nights each, 10 % apart: 20 deviations of ~9.5 %
        key = (f"m{i}", "torch", "fp16", "bs1", "model")
        samples[key], classes[key] = [[1e-3] * 8, [1.1e-3] * 8], ("cuda", "host")
    key = ("m0", "onnxruntime", "fp16", "bs1", "graph")  # one ORT case: its class alone has 2 deviations
    samples[key], classes[key] = [[1e-3] * 8, [1e-3] * 8], ("cuda", "host")
    base = LatencyBaseline(sources=(), environment={}, datetime=None, samples=samples, interference={},
                           classes=classes)
    models = class_noise(base, 0.99)
    half, n = models[("cuda", "host", "torch", "model")]
    assert n == MIN_POOLED and half == pytest.approx(math.log(1.1), rel=1e-9)
    assert ("cuda", "host", "onnxruntime", "graph") not in models  # 2 deviations stand for nothing
    assert models[("cuda", "host")][1] == MIN_POOLED + 2
    record = {"device": "cuda:0", "bound": "host"}
    assert between_half(models, record, ("x", "torch", "fp16", "bs1", "model"))[1] == ("cuda", "host", "torch",
                                                                                           "model")
    assert between_half(models, record, key)[1] == ("cuda", "host")  # the coarser class
    assert between_half(models, {**record, "bound": "device"}, key) is None  # no device-bound case was kept
    assert between_half(models, {**record, "device": "cpu"}, key) is None


def test_a_case_without_a_class_or_a_second_night_is_passed_over_not_the_rest() -> None:
    """class_noise skips a case with one kept night, or with no class (a record from before classes were kept), and
    goes on to the cases after it; between_half reads a record without a bound as host-bound (the cautious answer)
    and finds CPU cases' classes by their kind, ``cpu``."""
    from metrics.regression import MIN_POOLED
    from suite.gate.baselines import LatencyBaseline
    from suite.gate.bound import between_half, class_noise

    samples, classes = {}, {}
    first = ("m", "torch", "fp32", "bs1", "model")
    samples[first], classes[first] = [[1e-3] * 8], ("cpu", "host")  # one night: nothing to deviate from
    unclassed = ("m", "torch", "fp32", "bs2", "model")
    samples[unclassed] = [[1e-3] * 8, [2e-3] * 8]  # two nights, no class
    for i in range(MIN_POOLED // 2):
        key = (f"m{i}", "torch", "fp32", "bs4", "model")
        samples[key], classes[key] = [[1e-3] * 8, [1.1e-3] * 8], ("cpu", "host")
    base = LatencyBaseline(sources=(), environment={}, datetime=None, samples=samples, interference={},
                           classes=classes)
    models = class_noise(base, 0.99)
    assert set(models) == {("cpu", "host", "torch", "model"), ("cpu", "host")}
    assert models[("cpu", "host")][1] == MIN_POOLED  # neither the one-night case nor the unclassed one counted
    key = ("x", "torch", "fp32", "bs1", "model")
    assert between_half(models, {"device": "cpu"}, key) == (models[("cpu", "host", "torch", "model")][0],
                                                            ("cpu", "host", "torch", "model"))
    assert between_half(models, {"device": "cpu", "bound": "device"}, key) is None
    cuda = {("cuda", "host"): (0.5, MIN_POOLED)}
    assert between_half(cuda, {"device": "cuda:0"}, key) == (0.5, ("cuda", "host"))  # no bound: host-bound
    assert between_half(cuda, {"bound": "host"}, key) is None  # no device: a CPU case


def test_a_host_bound_gpu_case_is_paced_by_the_host_reference_timed_beside_its_rounds() -> None:
    """metrics.host_pace and suite.gate.bound.host_paced (issue 42): a host-bound GPU case timed while the host ran 1.4x
    slow reads 1.4x slow, and so does the reference timed before each of its rounds; paced, both sides sit at one
    host speed and the case is unchanged. A real slowdown of the case (the reference did not move) stays in the paced
    rounds. Paced on both sides or on neither: a run or the current rounds without a reference each leaves it raw."""
    import math

    from metrics.host_pace import pace, paced_runs
    from suite.gate.baselines import LatencyBaseline
    from suite.gate.bound import class_noise, host_paced

    key = ("m", "torch", "fp16", "bs1", "model")
    base_runs, base_refs = [[2e-3, 2.2e-3, 2.1e-3], [2.8e-3, 3.0e-3, 2.9e-3]], [[1e-4] * 3, [1.4e-4] * 3]
    base = LatencyBaseline(sources=(), environment={}, datetime=None, samples={key: base_runs}, interference={},
                           classes={key: ("cuda", "host")}, host_refs={key: base_refs})
    record = {"device": "cuda:0", "bound": "host", "samples_s": [2.8e-3, 3.08e-3, 2.94e-3], "host_ref_s": [1.4e-4] * 3}
    got = host_paced(record, base, key)
    assert got is not None
    runs, current = got
    scale = 1.2e-4  # the median of the runs' reference medians
    assert runs == [pytest.approx([s * scale / 1e-4 for s in base_runs[0]]),
                    pytest.approx([s * scale / 1.4e-4 for s in base_runs[1]])]
    assert current == pytest.approx([s * scale / 1.4e-4 for s in record["samples_s"]])
    assert current == pytest.approx([2.4e-3, 2.64e-3, 2.52e-3])  # the host's 1.4x taken out: 2.1 -> 2.52 * 1.2/1.2
    slower = {**record, "samples_s": [s * 1.05 for s in record["samples_s"]]}  # the case itself 5 % slower
    assert host_paced(slower, base, key)[1] == pytest.approx([c * 1.05 for c in current])
    # neither side paced without a reference for each of its rounds
    assert host_paced({**record, "host_ref_s": None}, base, key) is None
    assert host_paced({**record, "host_ref_s": [1.4e-4] * 2}, base, key) is None
    assert host_paced({**record, "host_ref_s": [1.4e-4, 0.0, 1.4e-4]}, base, key) is None
    assert host_paced(record, LatencyBaseline(sources=(), environment={}, datetime=None, samples={key: base_runs},
                                              interference={}, host_refs={key: [base_refs[0], None]}), key) is None
    assert host_paced({**record, "bound": "device"}, base, key) is None  # the device's time: raw
    assert host_paced({**record, "device": "cpu"}, base, key) is None  # a CPU case: raw
    assert host_paced({k: v for k, v in record.items() if k != "device"}, base, key) is None
    assert pace([1.0], [2.0], 0.0) is None and pace([1.0, 2.0], [2.0, 2.0], 1.0) == [0.5, 1.0]
    assert pace([1.0], [math.inf], 1.0) is None and pace([], [], 1.0) is None  # no round, no reference: raw
    assert paced_runs([], []) is None and paced_runs([[1.0]], [[1.0], [1.0]]) is None
    assert paced_runs([[1.0]], None) is None and paced_runs([[1.0]], [[1.0]]) == ([[1.0]], 1.0)
    # the class model learns what the gate compares: the paced nights (here identical) deviate by nothing
    samples = {(f"m{i}", "torch", "fp16", "bs1", "model"): base_runs for i in range(12)}
    paced_base = LatencyBaseline(sources=(), environment={}, datetime=None, samples=samples, interference={},
                                 classes={k: ("cuda", "host") for k in samples},
                                 host_refs={k: [[1e-4] * 3, [1e-4 * 2.9 / 2.1] * 3] for k in samples})
    raw_base = LatencyBaseline(sources=(), environment={}, datetime=None, samples=samples, interference={},
                               classes={k: ("cuda", "host") for k in samples})
    paced_half = class_noise(paced_base, 0.99)[("cuda", "host")][0]
    assert paced_half == pytest.approx(0.0, abs=1e-9) and class_noise(raw_base, 0.99)[("cuda", "host")][0] > 0.3


def test_a_classs_interval_holds_for_the_night_not_for_one_case() -> None:
    """class_noise's quantile is the night's (Bonferroni over the class's cases): 100 cases of two nights, one that
    moved 9 %, two 2 %, the rest at most 0.4 %: at 99 % for one case the interval would stop near 2 %, so that one
    case in a few nights fails by chance; at 1 - 0.01/100 it reaches 9 %. A device-bound class is never paced, even
    where its runs carry host references (its time is the device's)."""
    import math

    import numpy as np

    from suite.gate.baselines import LatencyBaseline
    from suite.gate.bound import class_noise

    samples, classes, refs = {}, {}, {}
    for i in range(100):
        key = (f"m{i}", "torch", "fp16", "bs1", "graph")
        second = 1.09e-3 if i == 0 else 1.02e-3 if i < 3 else 1.0e-3 * (1 + 0.001 * (i % 5))
        samples[key], classes[key] = [[1e-3] * 8, [second] * 8], ("cuda", "device")
        refs[key] = [[1e-4] * 8, [1.5e-4] * 8]  # the host 1.5x slow on the second night: nothing to a device case
    base = LatencyBaseline(sources=(), environment={}, datetime=None, samples=samples, interference={},
                           classes=classes, host_refs=refs)
    half, n = class_noise(base, 0.99)[("cuda", "device", "torch", "graph")]
    sizes = [abs(math.log(samples[k][1][0] / 1e-3)) for k in samples for _ in range(2)]  # two nights: +-d each
    assert n == 200 and half == pytest.approx(float(np.quantile(sizes, 1 - 0.01 / 100)))
    assert float(np.quantile(sizes, 0.99)) < math.log(1.025) < math.log(1.08) < half <= math.log(1.09) + 1e-12
    # the level counts the class's cases, one each: three nights a case, so that the top deviations differ
    last = [1e-3 * (1.09 if i == 0 else 1.001 + i / 1e4) for i in range(10)]
    three = {(f"m{i}", "torch", "fp16", "bs1", "graph"): [[1e-3] * 8, [1e-3] * 8, [x] * 8] for i, x in enumerate(last)}
    base = LatencyBaseline(sources=(), environment={}, datetime=None, samples=three, interference={},
                           classes={k: ("cuda", "device") for k in three})
    half, n = class_noise(base, 0.99)[("cuda", "device", "torch", "graph")]
    devs = [abs(d) for runs in three.values() for d in
            (math.log(runs[2][0] / 1e-3) * f for f in (-0.5, -0.5, 1.0))]
    assert n == 30 and half == pytest.approx(float(np.quantile(devs, 1 - 0.01 / 10)), rel=1e-9)
    assert half != pytest.approx(float(np.quantile(devs, 1 - 0.01 / 11)), rel=1e-9)
