"""The report opens with what differs between the baseline runs' environments and this run's (issue 26, item 2):
the pure difference (metrics/environment_diff.py), and a real run against a baseline whose recorded environment was
edited, whose terminal and HTML report name the difference before the verdict."""

from __future__ import annotations

from typing import Any

import pytest

from metrics.environment_diff import (
    KEY_ORDER,
    NO_DIFFERENCE,
    EnvironmentDifference,
    environment_differences,
    value_text,
)

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
