"""tools/replay_nights.py: saved nights judged again by the gate as it is now, on synthetic nights (issue 42)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tools import replay_nights

pytestmark = pytest.mark.selftest


def _night(path: Path, seed: int, host_speed: float, slower: float = 1.0) -> Path:
    """One night: 24 device-bound graph replays (0.3 % between nights) and 24 host-bound eager cases whose time
    follows the host's speed, as does their host reference (the host's slow mode: ``host_speed``)."""
    rng = random.Random(seed)
    benchmarks = []
    for i in range(24):
        for bound, path_name, base in (("device", "graph", 1e-3), ("host", "model", 2e-3)):
            level = base * (1 + (i % 6) / 10) * (host_speed if bound == "host" else 1.0) * slower
            level *= 1 + rng.gauss(0, 0.003)
            samples = [level * (1 + rng.gauss(0, 0.002)) for _ in range(40)]
            refs = [1e-4 * host_speed * (1 + rng.gauss(0, 0.002)) for _ in range(40)]
            benchmarks.append({"name": f"test_latency[m{i}-{path_name}]", "extra_info": {
                "model": f"m{i}", "engine": "torch", "precision": "fp16", "batch_size": 1, "shape": "bs1",
                "path": f"latency-{path_name}", "device": "cuda:0", "bound": bound, "clock": "cuda events",
                "samples_s": samples, "host_ref_s": refs, "gate": {"interference": 0.0}}})
    path.write_text(json.dumps({"benchmarks": benchmarks, "machine_info": {}}))
    return path


def test_unchanged_nights_pass_and_a_real_slowdown_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Five unchanged nights, the host 1.0-1.6x slow in turn: from the third (two kept) every case is judged, the
    host-bound ones host-paced, and none regresses (exit 0). A night with every case 10 % slower is not kept and
    exits 1; injected (--inject) it is listed and the exit stays 0."""
    speeds = (1.0, 1.6, 1.0, 1.3, 1.0)
    nights = [_night(tmp_path / f"n{i}.json", i, s) for i, s in enumerate(speeds, 1)]
    assert replay_nights.main([str(p) for p in nights]) == 0
    out = capsys.readouterr().out
    assert "| n1 | none | yes | 0 of 48 (0 %) | 0 of 24 | 0 of 24 | - | 0 |" in out
    assert "| n3 | 2 | yes | 48 of 48 (100 %) | 24 of 24 | 24 of 24 | 0 of 2 | 0 |" in out  # groups need 3 nights
    assert "| n5 | 4 | yes | 48 of 48 (100 %) | 24 of 24 | 24 of 24 | 2 of 2 | 0 |" in out
    slow = _night(tmp_path / "n6.json", 6, 1.3, slower=1.10)
    assert replay_nights.main([str(p) for p in (*nights, slow)]) == 1
    out = capsys.readouterr().out
    assert "| n6 | 5 | no | 48 of 48 (100 %) | 24 of 24 | 24 of 24 | 2 of 2 | 50 |" in out  # 48 cases, 2 groups
    assert "- n6: group cuda/device/torch: median +10" in out
    assert "- n6: m0-torch-fp16-bs1-graph (device-bound): +10" in out
    assert "- n6: m0-torch-fp16-bs1-model (host-bound): +9." in out  # the host's 1.3x taken out by the pacing
    again = replay_nights.main([*map(str, nights), str(_night(tmp_path / "n6b.json", 6, 1.0)), "--inject", "6=0.1"])
    assert again == 0 and "| n6 (+10 % injected) | 5 | no |" in capsys.readouterr().out
    device = replay_nights.main([*map(str, nights), str(_night(tmp_path / "n6c.json", 6, 1.0)), "--inject", "6=0.02",
                                 "--inject-bound", "device"])
    out = capsys.readouterr().out
    assert device == 0 and "- n6 (+2 % injected): group cuda/device/torch: median +2" in out
    assert "group cuda/host/torch" not in out and "(host-bound)" not in out  # only the device-bound cases slowed


def test_a_file_that_is_not_a_night_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert replay_nights.main([str(bad)]) == 2
    assert "replay_nights:" in capsys.readouterr().err
