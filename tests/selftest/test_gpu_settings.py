"""The GPU's power limit and clocks are part of the environment fingerprint (suite/environment.py gpu_settings), so
an upgrade report names a power-capped or clock-locked card among the differences (issue 26)."""

from __future__ import annotations

from typing import Any

import pytest

from metrics.environment_diff import environment_differences
from suite.environment import gpu_settings

pytestmark = pytest.mark.selftest


class FakeNVML:
    """pynvml's calls that gpu_settings makes, on one H100-like card; ``refuse`` names calls a VM would refuse."""

    NVML_CLOCK_SM = 1

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.refuse = refuse
        self.asked: list[Any] = []

    def _call(self, name: str, value: Any) -> Any:
        if name in self.refuse:
            raise RuntimeError(f"NVML_ERROR_NOT_SUPPORTED ({name})")
        return value

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.asked.append(uuid)
        return "handle"

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.asked.append(index)
        return "handle"

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: str) -> Any:
        return self._call("power", 700000)

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> Any:
        assert clock == self.NVML_CLOCK_SM
        return self._call("max", 1980)

    def nvmlDeviceGetApplicationsClock(self, handle: str, clock: int) -> Any:
        return self._call("app", 1755)

    def nvmlDeviceGetPersistenceMode(self, handle: str) -> Any:
        return self._call("persistence", 1)


def test_power_limit_and_clocks_of_the_device_by_its_uuid() -> None:
    nvml = FakeNVML()
    assert gpu_settings(nvml, "GPU-1234") == {"gpu_power_limit_w": 700.0, "gpu_max_sm_clock_mhz": 1980,
                                              "gpu_applications_sm_clock_mhz": 1755, "gpu_persistence_mode": True}
    assert nvml.asked == ["GPU-1234"]  # NVML's own numbering is not CUDA's under CUDA_VISIBLE_DEVICES
    gpu_settings(nvml, None)
    assert nvml.asked[-1] == 0


def test_a_figure_nvml_refuses_is_left_out_not_a_failure() -> None:
    assert gpu_settings(FakeNVML(refuse=("app", "persistence")), "GPU-1") == {"gpu_power_limit_w": 700.0,
                                                                             "gpu_max_sm_clock_mhz": 1980}


def test_a_power_capped_card_is_named_among_the_differences() -> None:
    base = {"gpu_name": "NVIDIA H100 80GB HBM3", **gpu_settings(FakeNVML(), "GPU-1")}
    capped = {**base, "gpu_power_limit_w": 350.0}
    found = environment_differences(capped, [base])
    assert [d.describe() for d in found] == ["gpu_power_limit_w: 700.0 -> 350.0"]
