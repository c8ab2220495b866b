"""tools/first_call_probe.py: the reference's first and second call at each batch, through the suite's own loading
(on the CPU here: the figures' meaning is for a GPU; what is checked is that each batch is timed and reported)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools import first_call_probe

TOML = """
[models.overflow_mlp]
factory = "tests.selftest.overflow_models:overflow_mlp"
inputs = [{ name = "x", shape = [16], dtype = "float32", low = -1.0, high = 1.0 }]
outputs = ["logits"]
batch_sizes = [1, 8]
precisions = ["fp32"]
engines = ["torch"]
"""


def test_each_batch_is_called_twice_through_the_suites_reference(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "probe.toml"
    config.write_text(TOML)
    calls: list[int] = []
    from engines.pytorch import backend

    real = backend.TorchRunner.infer

    def counted(self, feed):  # type: ignore[no-untyped-def]
        calls.append(len(next(iter(feed.values()))))
        return real(self, feed)

    monkeypatch.setattr(backend.TorchRunner, "infer", counted)
    result = first_call_probe.probe(str(config), str(tmp_path / "cache"), "cpu", "overflow_mlp", "default", [1, 4],
                                    profile=True)
    assert calls == [1, 1, 4, 4]  # the reference's own runner, each batch twice, in the order given
    assert [r["batch"] for r in result["batches"]] == [1, 4]
    assert all(r["first_s"] > 0 and r["second_s"] > 0 for r in result["batches"])
    assert result["profile_top"]  # the first call at the second batch, profiled
    text = first_call_probe.table([result])
    assert "| overflow_mlp | default |" in text and "| 4 |" in text
    assert "overflow_mlp default, first call at batch 4:" in text


def test_an_unknown_variant_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown variant 'fast'"):
        first_call_probe.probe("unused.toml", str(tmp_path), "cpu", "m", "fast", [1], profile=False)


def test_a_failed_process_is_named_and_the_exit_status_is_2(tmp_path: Path, monkeypatch, capsys) -> None:
    ok = {"model": "m", "variant": "default", "warm_up_s": 0.0, "load_s": 0.1,
          "batches": [{"batch": 1, "first_s": 2.0, "second_s": 0.01}], "profile_top": None}

    def run(cmd, **kwargs):  # type: ignore[no-untyped-def]
        variant = cmd[-1]
        if variant == "no-cudnn":
            return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="CUDA error: out of memory")
        return subprocess.CompletedProcess(cmd, 0, stdout=first_call_probe.json.dumps(ok) + "\n", stderr="")

    monkeypatch.setattr(first_call_probe.subprocess, "run", run)
    status = first_call_probe.main(["--models", "m", "--variants", "default,no-cudnn", "--batches", "1",
                                    "--json", str(tmp_path / "out.json")])
    out, err = capsys.readouterr()
    assert status == 2
    assert "m no-cudnn: the process failed (exit 1)" in err and "out of memory" in err
    assert "| m | default | 0.0 | 0.1 | 1 | 2.0 | 0.01 |" in out
    assert first_call_probe.json.loads((tmp_path / "out.json").read_text()) == [ok]
