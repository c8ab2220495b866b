"""A cell's GPU memory as what it added over what the process held when its window opened, so that the drift gate
does not read the order of the cells as a change of an engine.

Why (docs/gpu.md, the thirteenth sitting): two identical one-GPU runs of the whole tier on an H200 ran the cells in
another order (the scheduler orders them by the previous run's seconds) and 3 and 18 of 51 cells' peaks moved beyond
the gate's 1.5x: a peak counts the model's reference engine, kept through its other cells, and whatever the cells
before it left. The meter and the gate are exercised here with a stand-in for torch's allocator and NVML."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from metrics.drift import compare_memory
from suite import gpu_memory
from suite.gpu_memory import MemoryMeter


class FakeProcess:
    """What the process holds: NVML's figure and torch's allocator (allocated now, its peak since a reset)."""

    def __init__(self, nvml: float, allocated: float) -> None:
        self.nvml, self.allocated, self.peak = nvml, allocated, allocated

    # torch.cuda's part the meter uses
    def memory_allocated(self) -> float:
        return self.allocated * gpu_memory.MIB

    def max_memory_allocated(self) -> float:
        return self.peak * gpu_memory.MIB

    def reset_peak_memory_stats(self) -> None:
        self.peak = self.allocated

    def grow(self, nvml: float, allocated: float) -> None:
        self.nvml += nvml
        self.allocated += allocated
        self.peak = max(self.peak, self.allocated)


def window(monkeypatch: pytest.MonkeyPatch, held_nvml: float, held_allocated: float, adds: tuple[float, float],
           frees: bool = True) -> dict[str, Any]:
    """One cell's window in a process that holds ``held_*`` MiB when it opens; the cell adds ``adds`` (NVML,
    allocator) and frees its tensors before the window closes."""
    process = FakeProcess(held_nvml, held_allocated)
    monkeypatch.setattr(gpu_memory, "_torch_cuda", lambda: process)
    meter = MemoryMeter("cpu")  # no sampling thread; NVML is the stand-in below
    meter.error = None
    monkeypatch.setattr(meter, "nvml_used_mib", lambda: process.nvml)
    meter.begin("m-onnxruntime-fp16")
    process.grow(*adds)
    meter.mark()
    if frees:
        process.grow(0.0, -adds[1])
    return meter.end("m-onnxruntime-fp16")


def test_a_window_says_what_the_cell_added_over_what_the_process_held(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = window(monkeypatch, held_nvml=3000.0, held_allocated=1000.0, adds=(2000.0, 500.0))
    assert figures["nvml_peak_mib"] == 5000.0 and figures["allocator_peak_mib"] == 1500.0
    assert figures["nvml_start_mib"] == 3000.0 and figures["allocator_start_mib"] == 1000.0
    assert figures["nvml_added_mib"] == 2000.0 and figures["allocator_added_mib"] == 500.0


def test_the_same_engine_after_other_cells_has_not_drifted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Night 1 ran the cell after the model's reference engine (kept alive), night 2 before it: the peaks differ
    by what the process held, not by what the engine took."""
    after_reference = window(monkeypatch, held_nvml=9000.0, held_allocated=2500.0, adds=(2000.0, 500.0))
    first = window(monkeypatch, held_nvml=1000.0, held_allocated=100.0, adds=(2000.0, 500.0))
    assert not [c for c in compare_memory(after_reference, first, 1.5) if c.failed]
    assert not [c for c in compare_memory(first, after_reference, 1.5) if c.failed]
    assert [c.figure for c in compare_memory(first, after_reference, 1.5)] == ["nvml_added_mib", "allocator_added_mib"]
    # the peaks alone would have called it a drift (11000 against 3000 MiB)
    peaks_only = {k: v for k, v in after_reference.items() if not k.endswith("_added_mib")}
    first_peaks = {k: v for k, v in first.items() if not k.endswith("_added_mib")}
    assert [c.figure for c in compare_memory(first_peaks, peaks_only, 1.5) if c.failed] == ["nvml_peak_mib",
                                                                                          "allocator_peak_mib"]


def test_an_engine_that_takes_twice_the_memory_has_drifted_whatever_ran_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = window(monkeypatch, held_nvml=9000.0, held_allocated=2500.0, adds=(2000.0, 500.0))
    doubled = window(monkeypatch, held_nvml=1000.0, held_allocated=100.0, adds=(4000.0, 1000.0))
    grew = [c for c in compare_memory(before, doubled, 1.5) if c.failed]
    assert [c.figure for c in grew] == ["nvml_added_mib", "allocator_added_mib"]
    assert "nvml_added_mib 2000 -> 4000 MiB (2.00x" in grew[0].describe()


def test_a_baseline_from_before_the_added_figures_is_compared_by_its_peaks(monkeypatch: pytest.MonkeyPatch) -> None:
    now = window(monkeypatch, held_nvml=1000.0, held_allocated=100.0, adds=(2000.0, 500.0))
    old = {"nvml_peak_mib": 2900.0, "allocator_peak_mib": None}
    assert [(c.figure, c.failed) for c in compare_memory(old, now, 1.5)] == [("nvml_peak_mib", False)]


def test_a_cpu_window_has_no_added_figures() -> None:
    meter = MemoryMeter("cpu")
    meter.begin("a-torch-fp32")
    figures = meter.end("a-torch-fp32")
    assert figures["nvml_added_mib"] is None and figures["allocator_added_mib"] is None
    assert compare_memory(figures, figures, 1.5) == []


def test_a_cell_that_frees_memory_peaks_at_its_start_and_added_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start is the window's first reading: a cell during which NVML's figure only fell still peaked there."""
    figures = window(monkeypatch, held_nvml=3000.0, held_allocated=1000.0, adds=(-500.0, 0.0))
    assert figures["nvml_peak_mib"] == 3000.0 and figures["nvml_added_mib"] == 0.0
    assert figures["allocator_peak_mib"] == 1000.0 and figures["allocator_added_mib"] == 0.0


class FakeNvml:
    """NVML's part the meter reads: the device's compute processes (with or without the v3 call) and its memory."""

    def __init__(self, processes: list[tuple[int, int]] | None, device_used: int) -> None:
        if processes is not None:
            self.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
                SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]
        self.nvmlDeviceGetMemoryInfo = lambda handle: SimpleNamespace(used=device_used)


def test_the_meter_reads_this_processs_memory_from_nvmls_process_list(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    meter = MemoryMeter("cpu")
    meter._nvml, meter._handle = FakeNvml([(1, 9 * gpu_memory.MIB), (os.getpid(), 3 * gpu_memory.MIB)],
                                          50 * gpu_memory.MIB), object()
    assert meter.nvml_used_mib() == 3.0 and meter.source == "process"
    meter._nvml = FakeNvml([(1, 9 * gpu_memory.MIB)], 50 * gpu_memory.MIB)  # a pid namespace hides this process
    assert meter.nvml_used_mib() == 50.0 and meter.source == "device"
    meter._nvml = FakeNvml(None, 40 * gpu_memory.MIB)  # a binding without the call
    assert meter.nvml_used_mib() == 40.0 and meter.source == "device"


@pytest.mark.parametrize("baseline,current,grew", [
    (100.0, 150.0, False), (100.0, 150.1, False),  # beyond 1.5x, but by no more than the slack (64 MiB)
    (200.0, 300.0, False), (200.0, 300.5, True),   # at 1.5x exactly: not beyond it; a hair over, by > 64 MiB: grew
    (1000.0, 1064.0, False), (100.0, 164.0, False), (100.0, 164.5, True),  # the slack is a strict bound too
    (1000.0, 900.0, False), (0.0, 65.0, True),
])
def test_memory_grows_only_beyond_both_the_factor_and_the_slack(baseline: float, current: float, grew: bool) -> None:
    from metrics.drift import MEMORY_SLACK_MIB, MemoryComparison, memory_grew

    assert MEMORY_SLACK_MIB == 64.0
    assert memory_grew(baseline, current, 1.5) is grew
    assert MemoryComparison("nvml_added_mib", baseline, current, 1.5).failed is grew


def test_a_torch_cell_is_judged_by_the_allocator_as_nvml_sees_only_what_its_cache_lacked() -> None:
    """Four unchanged one-GPU nights on an H200 (2026-11-29): resnet18-torch-fp16's NVML figure read 2880, 4, 2638
    and 4 MiB added (the caching allocator had the blocks already on nights 2 and 4), the allocator's 1196, 1151,
    1196, 1151; night 3 failed on NVML's 4 -> 2638. For an engine of torch's allocator NVML's figure is shown, not
    judged, where the allocator's is compared; the allocator's still fails a real growth, and any other engine's
    NVML figure is judged as before."""
    night2 = {"engine": "torch", "nvml_added_mib": 4.0, "allocator_added_mib": 1151.3}
    night3 = {"engine": "torch", "nvml_added_mib": 2638.0, "allocator_added_mib": 1196.0}
    compared = compare_memory(night2, night3, 1.5)
    assert [(c.figure, c.failed) for c in compared] == [("nvml_added_mib", False), ("allocator_added_mib", False)]
    described = compared[0].describe()
    assert "not judged: torch's caching allocator" in described and "4 -> 2638 MiB" in described
    assert not compared[0].failed and compared[0].unjudged is not None and compared[1].unjudged is None
    assert [c.figure for c in compare_memory(night2, {**night3, "engine": "inductor"}, 1.5) if c.failed] == []
    grown = compare_memory(night2, {**night3, "allocator_added_mib": 2400.0}, 1.5)
    assert [c.figure for c in grown if c.failed] == ["allocator_added_mib"]
    # another engine's memory is not the allocator's: its NVML figure is judged
    ort = compare_memory({**night2, "engine": "onnxruntime"}, {**night3, "engine": "onnxruntime"}, 1.5)
    assert [c.figure for c in ort if c.failed] == ["nvml_added_mib"] and "allowed 1.5x" in ort[0].describe()
    # a torch cell without the allocator's figure on both sides keeps NVML's judged: nothing else would judge it
    alone = compare_memory({"engine": "torch", "nvml_added_mib": 4.0}, night3, 1.5)
    assert [(c.figure, c.failed) for c in alone] == [("nvml_added_mib", True)]
