"""The upgrade rehearsal (tools/rehearse_upgrade.py, issue 26): its plan, and that a run which imported another
version than it was meant to stops it, on CPU and without installing anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import rehearse_upgrade as rehearsal

pytestmark = pytest.mark.selftest


def test_the_plan_installs_the_old_version_beside_then_baselines_then_gates(tmp_path: Path) -> None:
    steps = rehearsal.plan("onnxruntime", "1.22.0", "1.32.0", 3, tmp_path, ["tests/parity"], tmp_path / "ec",
                           python="py")
    assert [s.label for s in steps] == ["install", "old 1/3", "old 2/3", "old 3/3", "new"]
    install = steps[0].argv
    assert install[:3] == ("py", "-m", "pip") and "--no-deps" in install and "onnxruntime==1.22.0" in install
    assert install[install.index("--target") + 1] == str(tmp_path / "old-site")
    for i, step in enumerate(steps[1:4], 1):
        assert step.env["PYTHONPATH"].split(":")[0] == str(tmp_path / "old-site")  # the old version first
        assert step.expect_version == "1.22.0" and step.results == tmp_path / f"old-{i}.json"
        assert step.argv[step.argv.index("--benchmark-save") + 1] == f"old{i}"
    new = steps[-1]
    assert new.env == {} and new.expect_version == "1.32.0"
    assert new.argv[new.argv.index("--latency-baseline") + 1] == "last:3"
    assert new.argv[new.argv.index("--accuracy-baseline") + 1] == str(tmp_path / "old-3.json")
    assert "--html" in new.argv and "tests/parity" in new.argv
    assert {s.argv[s.argv.index("--engine-cache") + 1] for s in steps[1:]} == {str(tmp_path / "ec")}
    storages = {s.argv[s.argv.index("--benchmark-storage") + 1] for s in steps[1:]}
    assert storages == {f"file://{tmp_path / 'benchmarks'}"}  # the gated run reads what the old runs saved


def _results(path: Path, version: str) -> None:
    path.write_text(json.dumps({"environment": {"onnxruntime": version, "onnxruntime_imported": version}}))


def test_a_run_that_imported_the_wrong_version_stops_the_rehearsal(tmp_path: Path) -> None:
    steps = rehearsal.plan("onnxruntime", "1.22.0", "1.32.0", 1, tmp_path, [], tmp_path / "ec", python="py")
    wrote = {"old 1/1": "1.32.0", "new": "1.32.0"}  # the old-site copy was shadowed: the old run used the new one

    def run(step: rehearsal.Step) -> int:
        if step.results is not None:
            _results(step.results, wrote[step.label])
        return 0

    with pytest.raises(rehearsal.RehearsalError, match="old 1/1: the run imported onnxruntime 1.32.0, not 1.22.0"):
        rehearsal.rehearse(steps, "onnxruntime", run=run, say=lambda text: None)


def test_the_rehearsal_ends_with_the_gated_runs_status(tmp_path: Path) -> None:
    steps = rehearsal.plan("onnxruntime", "1.22.0", "1.32.0", 2, tmp_path, [], tmp_path / "ec", python="py")
    ran: list[str] = []

    def run(step: rehearsal.Step) -> int:
        ran.append(step.label)
        if step.results is not None:
            _results(step.results, step.expect_version or "?")
        return 1 if step.label == "new" else 0  # the new version regressed

    assert rehearsal.rehearse(steps, "onnxruntime", run=run, say=lambda text: None) == 1
    assert ran == ["install", "old 1/2", "old 2/2", "new"]


def test_a_failed_install_or_a_run_without_results_is_no_rehearsal(tmp_path: Path) -> None:
    steps = rehearsal.plan("onnxruntime", "1.22.0", "1.32.0", 1, tmp_path, [], tmp_path / "ec", python="py")
    with pytest.raises(rehearsal.RehearsalError, match="install failed"):
        rehearsal.rehearse(steps, "onnxruntime", run=lambda step: 1, say=lambda text: None)
    with pytest.raises(rehearsal.RehearsalError, match="old 1/1: the run wrote no usable"):
        rehearsal.rehearse(steps, "onnxruntime", run=lambda step: 0, say=lambda text: None)


def test_a_baseline_run_that_did_not_pass_is_no_standard(tmp_path: Path) -> None:
    steps = rehearsal.plan("onnxruntime", "1.22.0", "1.32.0", 1, tmp_path, [], tmp_path / "ec", python="py")

    def run(step: rehearsal.Step) -> int:
        if step.results is not None:
            _results(step.results, step.expect_version or "?")
        return 75 if step.label == "old 1/1" else 0  # not judged

    with pytest.raises(rehearsal.RehearsalError, match="old 1/1: the baseline run did not pass .exit 75"):
        rehearsal.rehearse(steps, "onnxruntime", run=run, say=lambda text: None)


def test_the_old_version_must_differ_from_the_installed_one(tmp_path: Path) -> None:
    installed = rehearsal.installed_version("onnxruntime")
    assert rehearsal.main(["--old", installed, "--dir", str(tmp_path)]) == 2
