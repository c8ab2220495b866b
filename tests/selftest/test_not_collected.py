"""Checks that cannot run on the run's device by design are not collected, and said once per reason (issue 24).

On a CPU, suite.toml's TensorRT cells, torch int8 and TF32, ONNX Runtime's TF32 and bf16 and the GPU-only
harness-overhead check were 166 'not judged (unsupported)' skips among 169 judgements. Now they are deselected,
one line per reason in the summary; what the user asked for by name (--engines, --precisions, a test id, the
harness-overhead file, --overhead-model) and a required engine that cannot run at all stay, and are reported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engines.ort_import import import_onnxruntime
from tests.selftest.suite_runs import CHILD_ENV, ROOT, TINY, explain, run_suite, suite_args

pytestmark = pytest.mark.selftest

ACCURACY = str(ROOT / "tests" / "accuracy")
OVERHEAD = str(ROOT / "tests" / "latency" / "test_harness_overhead.py")
TESTS = (ACCURACY, str(ROOT / "tests" / "parity" / "test_parity.py::test_parity_on_dataset"),
         str(ROOT / "tests" / "latency"))  # the folder: naming the harness-overhead file asks for that check
TRT = ("TensorRT needs a CUDA device: run with --device cuda:0 (this run uses --device cpu)")
TORCH_TF32 = "TF32 is a CUDA tensor-core math mode; there is no CPU path"
ORT_TF32 = "onnxruntime CPUExecutionProvider has no tf32 path (TF32 is a CUDA math mode)"
HARNESS = "the harness-overhead check compares CUDA-event loops; run with --device cuda:N"


def _config(tmp_path: Path, requires: str = '["torch", "onnxruntime"]') -> str:
    """The tiny config's model 'tiny' with TensorRT and TF32 too: 4 of its 6 cells cannot run on a CPU."""
    text = TINY.read_text().replace('requires = ["torch", "onnxruntime"]', f"requires = {requires}")
    start = text.index("[models.tiny]")
    end = text.index("[models", start + 1)
    tiny = text[start:end].replace('precisions = ["fp32"]', 'precisions = ["fp32", "tf32"]').replace(
        'engines = ["torch", "onnxruntime"]', 'engines = ["torch", "onnxruntime", "tensorrt"]')
    path = tmp_path / "suite.toml"
    path.write_text(text[:start] + tiny)  # without 'steady'
    return str(path)


def _collected(done) -> list[str]:
    return [line for line in done.stdout.splitlines() if "::" in line]


def _left_out(done) -> dict[str, str]:
    """The summary's not-collected lines: {reason: 'N checks of CELLS'}."""
    lines = done.stdout.split("not collected, as they cannot run on cpu", 1)[1].splitlines()[1:]
    return dict(reversed(line.strip().split(": ", 1)) for line in lines if line.startswith("  "))


def test_cells_that_cannot_run_on_the_cpu_are_not_collected_and_said_once_per_reason(tmp_path):
    done = run_suite(tmp_path, "--suite-config", _config(tmp_path), "--collect-only", tests=TESTS)
    assert done.returncode == 0, explain(done)
    collected = _collected(done)
    assert collected and not [t for t in collected if "tf32" in t or "tensorrt" in t or "harness" in t], collected
    # accuracy, dataset parity and 2 latency batches per cell; the harness-overhead check's 16 cases
    assert _left_out(done) == {TRT: "8 checks of tiny-tensorrt-fp32, tiny-tensorrt-tf32",
                               TORCH_TF32: "4 checks of tiny-torch-tf32", ORT_TF32: "4 checks of tiny-onnxruntime-tf32",
                               HARNESS: "16 checks of test_harness_overhead"}, explain(done)
    assert re.search(rf"{len(collected)}/{len(collected) + 32} tests collected \(32 deselected\)", done.stdout), \
        explain(done)


def test_the_run_judges_what_it_collected_and_says_what_it_left_out(tmp_path):
    """A real run: no check ends 'unsupported'; the left-out cells are said before the verdict, once."""
    done = run_suite(tmp_path, "--suite-config", _config(tmp_path), "--accept-not-judged", "none", tests=TESTS[:2])
    assert done.returncode == 0, explain(done)
    before, verdict = done.stdout.split("VERDICT: PASSED", 1)
    assert "checks: 3 passed, 0 failed, 0 not judged" in verdict, explain(done)
    assert before.count(f"  4 checks of tiny-tensorrt-fp32, tiny-tensorrt-tf32: {TRT}") == 1, explain(done)


@pytest.mark.parametrize("args,tests,wanted", [
    (("--engines", "torch,onnxruntime"), TESTS, ("tiny-torch-tf32", "tiny-onnxruntime-tf32")),
    (("--precisions", "fp32,tf32"), TESTS, ("tiny-torch-tf32", "tiny-onnxruntime-tf32", "tiny-tensorrt-tf32")),
    ((), (f"{ACCURACY}/test_accuracy.py::test_top1_top5[tiny-tensorrt-tf32]",), ("tiny-tensorrt-tf32",)),
])
def test_a_cell_asked_for_by_name_is_collected(tmp_path, args, tests, wanted):
    """--engines and --precisions name what to judge: their cells are collected, and reported (not judged, or
    failed where the engine is required); so is a test named by its id."""
    done = run_suite(tmp_path, "--suite-config", _config(tmp_path), "--collect-only", *args, tests=tests)
    assert done.returncode == 0, explain(done)
    for cell in wanted:
        assert [t for t in _collected(done) if f"[{cell}" in t], (cell, explain(done))


def test_a_required_engine_that_cannot_run_here_at_all_is_collected_and_fails_the_run(tmp_path):
    """A config requiring TensorRT, run on a CPU: deselecting its cells would have read as '-k left them out'."""
    config = _config(tmp_path, requires='["torch", "tensorrt"]')
    done = run_suite(tmp_path, "--suite-config", config, "--collect-only", tests=TESTS)
    collected = _collected(done)
    assert [t for t in collected if "tiny-tensorrt-fp32" in t] and [t for t in collected if "tensorrt-tf32" in t]
    assert TRT not in done.stdout and TORCH_TF32 in done.stdout, explain(done)  # the others still go
    done = run_suite(tmp_path, "--suite-config", config, tests=(ACCURACY,))
    assert done.returncode == 1, explain(done)
    assert "required engine tensorrt: tensorrt is required ([run] requires in suite.toml) and none of its 2 checks " \
           "could run (not judged: unsupported" in done.stdout, explain(done)


@pytest.mark.parametrize("asked", [(), ("--overhead-model", "tiny"), ("harness file",)])
def test_the_harness_overhead_check_is_left_out_off_cuda_unless_asked_for(tmp_path, asked):
    if asked == ("harness file",):
        done = run_suite(tmp_path, "--suite-config", _config(tmp_path), "--collect-only", tests=(OVERHEAD,))
    else:
        done = run_suite(tmp_path, "--suite-config", _config(tmp_path), "--collect-only", *asked, tests=TESTS)
    harness = [t for t in _collected(done) if "test_harness_overhead" in t]
    assert len(harness) == (0 if not asked else 16), explain(done)
    assert (HARNESS in done.stdout) == (not asked), explain(done)


def test_under_xdist_the_controller_says_what_its_workers_left_out(tmp_path):
    """The workers deselect; the controller, which collects nothing, names the same cells by the same rule.
    PYTHONPATH: the workers start in the run's directory, where an editable install elsewhere (a git worktree's
    main checkout) would give them that checkout's suite instead of this one."""
    done = run_suite(tmp_path, "--suite-config", _config(tmp_path), "-n", "2", tests=(ACCURACY,),
                     env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, explain(done)
    assert _left_out(done) == {TRT: "tiny-tensorrt-fp32, tiny-tensorrt-tf32", TORCH_TF32: "tiny-torch-tf32",
                               ORT_TF32: "tiny-onnxruntime-tf32"}, explain(done)  # no harness line: not selected


PADDING = ('not sentence-embedding models (an input with role = "attention_mask" and a parity_dataset): the '
           "padding-invariance check has nothing to pad")
EMBEDDINGS = str(ROOT / "tests" / "parity" / "test_embeddings.py")


def _fp16_config(tmp_path: Path, parity_samples: int = 64) -> str:
    """The tiny model with ONNX Runtime fp16, which the CPU EP runs in fp32 (precision census: 0 of 2)."""
    text = TINY.read_text()
    start = text.index("[models.tiny]")
    tiny = text[start:text.index("[models", start + 1)]
    tiny = tiny.replace('precisions = ["fp32"]', 'precisions = ["fp32", "fp16"]')
    path = tmp_path / "suite.toml"
    path.write_text(text[:start] + tiny.replace("parity_samples = 64", f"parity_samples = {parity_samples}"))
    return str(path)


def test_a_cell_whose_precision_does_not_run_here_is_not_collected(tmp_path):
    """Issue 47: ONNX Runtime's CPU EP registers no fp16 conv/gemm/matmul kernel, so even a cold cache leaves the fp16
    cell's checks out, one line saying why (the kernel registry): a fresh clone's first run no longer collects them
    only to end them not judged. Named by --precisions, the cell is collected and judged (not judged,
    precision-not-run) and its census recorded; the next run says the census's words. Under another key (the
    model's table changed) the census is not used, and the prediction stands again."""
    config = _fp16_config(tmp_path)
    predicted = ("onnxruntime named fp16 but computes nothing in fp16 here (onnxruntime "
                 f"{import_onnxruntime().__version__}'s CPUExecutionProvider registers no float16 kernel for any "
                 "conv/gemm/matmul op)")
    cold = run_suite(tmp_path, "--suite-config", config, "--collect-only", tests=TESTS)
    assert _left_out(cold).get(predicted) == "4 checks of tiny-onnxruntime-fp16", explain(cold)
    assert not [t for t in _collected(cold) if "tiny-onnxruntime-fp16" in t], explain(cold)
    assert [t for t in _collected(cold) if "tiny-torch-fp16" in t], explain(cold)  # torch runs fp16: no prediction
    named = run_suite(tmp_path, "--suite-config", config, "--precisions", "fp32,fp16", "--accept-not-judged",
                      "precision-not-run,no-data", tests=(TESTS[1],))
    assert named.returncode == 0 and "not judged (precision-not-run, accepted): 1:" in named.stdout, explain(named)
    again = run_suite(tmp_path, "--suite-config", config, "--collect-only", tests=TESTS)
    left = _left_out(again)
    census = [r for r in left if r.startswith("onnxruntime named fp16 but computes nothing in fp16 here (the precision "
                                              "census of the run of ")]
    assert len(census) == 1 and left[census[0]] == "4 checks of tiny-onnxruntime-fp16", explain(again)
    changed = run_suite(tmp_path, "--suite-config", _fp16_config(tmp_path, 32), "--collect-only", tests=TESTS)
    assert _left_out(changed).get(predicted) == "4 checks of tiny-onnxruntime-fp16", explain(changed)


def test_the_padding_check_is_collected_for_sentence_embedding_models_only(tmp_path):
    """The config says which models are sentence-embedding models: the others' padding checks are left out, one
    line for all; named by id, one is collected (and ends not judged, no-data)."""
    done = run_suite(tmp_path, "--suite-config", _config(tmp_path), "--collect-only", tests=(EMBEDDINGS,))
    assert not _collected(done) and _left_out(done)[PADDING] == "1 check of tiny", explain(done)
    named = run_suite(tmp_path, "--suite-config", _config(tmp_path), "--collect-only",
                      tests=(f"{EMBEDDINGS}::test_padding_does_not_change_embeddings[tiny-onnxruntime-fp32]",))
    assert len(_collected(named)) == 1, explain(named)


NO_LABELS = ("declare no accuracy_dataset (labelled rows): top-1/top-5 has nothing to count, their engines are judged "
             "by parity; naming tests/accuracy or -m accuracy reports them (not judged, no-data)")
LATENCY_UNJUDGED = ("latency cases with nothing to judge them against (no --latency-baseline or "
                    "--benchmark-compare-fail, nothing saved): --benchmark-autosave times them and keeps the run for a "
                    "later --latency-baseline last:K")


def _main_job(tmp_path: Path, *args: str, tests: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The main job's collection (`.venv/bin/pytest --collect-only`) on the tiny config: without ``tests``, run from the
    checkout, where pytest takes its testpaths (which name nothing: asked_for)."""
    argv = suite_args(tmp_path, "--collect-only", *args, tests=tests or ("--collect-only",))
    return subprocess.run([sys.executable, "-m", "pytest", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **CHILD_ENV})


def test_the_main_job_leaves_out_what_could_only_end_not_judged(tmp_path):
    """Issue 47: a plain run collected the accuracy check of each model without labels and every latency case with no
    baseline, and ended each not judged (no-data, no-baseline): a third of the CPU tier's checks. Now each reason is
    one line, naming the option that brings them."""
    done = _main_job(tmp_path)
    assert done.returncode == 0, explain(done)
    collected = _collected(done)
    assert collected and not [t for t in collected if "test_latency[" in t or "test_top1_top5[steady]" in t], \
        explain(done)
    assert [t for t in collected if "test_top1_top5[tiny-" in t], explain(done)  # a labelled model's: judged
    left = _left_out(done)
    assert left[NO_LABELS] == "1 check of steady", explain(done)
    assert re.fullmatch(r"\d+ checks of tiny, steady", left[LATENCY_UNJUDGED]), explain(done)


@pytest.mark.parametrize("asked", [("--benchmark-autosave",), ("--benchmark-json", "/dev/null"), ("-m", "latency"),
                                   ("--latency-rounds", "5"), ("latency folder",)])
def test_latency_cases_are_collected_when_something_judges_keeps_or_names_them(tmp_path, asked):
    folder = asked == ("latency folder",)
    done = _main_job(tmp_path, *(() if folder else asked), tests=(str(ROOT / "tests" / "latency"),) if folder else ())
    assert done.returncode == 0, explain(done)
    assert [t for t in _collected(done) if "test_latency[" in t] and LATENCY_UNJUDGED not in done.stdout, \
        explain(done)


@pytest.mark.parametrize("asked", [("-m", "accuracy"), ("accuracy folder",)])
def test_the_accuracy_check_of_a_model_without_labels_is_collected_when_named(tmp_path, asked):
    """Named, it is reported: not judged (no-data), which a config that does not accept it fails on (exit 75)."""
    folder = asked == ("accuracy folder",)
    done = _main_job(tmp_path, *(() if folder else asked), tests=(ACCURACY,) if folder else ())
    assert [t for t in _collected(done) if "test_top1_top5[steady]" in t] and NO_LABELS not in done.stdout, \
        explain(done)


def test_the_rebuild_check_of_a_cell_whose_precision_does_not_run_is_not_judged(tmp_path):
    """Issue 45: the precision census was issued from ``gate.check()`` only, which the rebuild check never calls, so
    --rebuild-check of ONNX Runtime's 'fp16' cell on the CPU EP (every conv and gemm in fp32) passed as a check of
    fp16. The census is now issued after every test from the records it made (suite/hooks/runtest.py after_call); the
    fp32 cell's rebuild check beside it is judged, and passes."""
    rebuild = str(ROOT / "tests" / "parity" / "test_rebuild.py")
    ids = tuple(f"{rebuild}::test_rebuild_check[tiny-onnxruntime-{p}]" for p in ("fp32", "fp16"))
    args = ("--suite-config", _fp16_config(tmp_path), "--precisions", "fp32,fp16", "--engines", "onnxruntime",
            "--rebuild-check", "2")
    done = run_suite(tmp_path, *args, "--accept-not-judged", "precision-not-run", tests=ids)
    assert done.returncode == 0 and "checks: 1 passed, 0 failed, 1 not judged" in done.stdout, explain(done)
    assert "not judged (precision-not-run, accepted): 1:" in done.stdout, explain(done)
    assert "test_rebuild_check[tiny-onnxruntime-fp16]" in done.stdout.split("not judged (precision-not-run", 1)[1]
    strict = run_suite(tmp_path, *args, tests=ids)
    assert strict.returncode == 75 and "not judged (precision-not-run, NOT accepted)" in strict.stdout, explain(strict)
