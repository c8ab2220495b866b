"""A known failure absorbs only the assertion of the figures it names (issue 23, item 1), end to end.

The parity tests record each output's figures (suite.record) and then assert that none failed; the plugin judges
a covered failure on those records (suite/hooks/known_failures_runtime.py, from pytest_runtest_makereport). The real
tests always raise their own assertion, so the other paths are driven here by synthetic parity tests on a tiny
model's cell: they record a failed figure the entry declares and then end in another way. test_fail_closed.py and
the hostile corpus (known-failure-*) run the real parity tests on models that fail the declared way and another.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.selftest.suite_runs import ROOT, explain, run_suite

pytestmark = pytest.mark.selftest

_CONFIG = """
[run]
requires = ["torch", "onnxruntime"]
accept_not_judged = ["no-data"]

[models.m]
factory = "tests.selftest.tiny_models:two_input_net"
inputs = [{ name = "image", shape = [1, 8, 8], dtype = "float32", low = 0.0, high = 1.0 },
          { name = "extra", shape = [3], dtype = "float32", low = -1.0, high = 1.0 }]
outputs = ["out"]
batch_sizes = [1, 4]
engines = ["torch", "onnxruntime"]
accuracy_dataset = "tests.selftest.tiny_models:tiny_data"

[models.m.known_failures.onnxruntime-fp32]
reason = "synthetic"
outputs = ["out"]
metrics = ["isclose_pct", "top1"]
match = "(isclose|top-1) [0-9.]+% < "
checks = ["parity", "accuracy"]
expected = { isclose_pct = { value = 10.0, margin = 5.0 }, top1 = { value = 0.6, margin = 0.05 } }

[models.m.known_failures.onnxruntime-fp32.expected_on."generated:sparse"]
isclose_pct = { value = 2.0, margin = 1.5 }
top1 = { value = 0.6, margin = 0.05 }
"""

# Each test records output 'out' failing isclose, which the entry declares, then ends its own way.
_TESTS = '''
import pytest

pytestmark = pytest.mark.parity
FAILURE = "isclose 10.00% < 99.00% required (rtol=0.001, atol=1e-05)"
HEADLINE = f"output 'out' (4, 5): {FAILURE}"


def _record(suite, cell, name="out", failure=FAILURE, isclose_pct=10.0, dataset="d"):
    suite.record("parity", cell, dataset=dataset, name=name, shape=[4, 5], failures=[failure], isclose_pct=isclose_pct)


def test_declared(cell, suite):
    _record(suite, cell)
    assert False, f"{cell.id} on d: {HEADLINE}"


def test_value_error(cell, suite):
    _record(suite, cell)
    raise ValueError(f"{cell.id} on d: {HEADLINE}")


def test_another_assertion(cell, suite):
    _record(suite, cell)
    assert False, f"{cell.id}: the engine's isclose 10.00% < 99.00% was not what this assertion is about"


def test_nothing_recorded(cell, suite):
    assert False, f"{cell.id} on d: {HEADLINE}"


def test_an_undeclared_output_recorded(cell, suite):
    _record(suite, cell)
    _record(suite, cell, name="other")
    assert False, f"{cell.id} on d: {HEADLINE}\\n{cell.id} on d: output 'other' (4, 5): {FAILURE}"


def test_declared_padding(cell, suite):  # tests/parity/test_embeddings' records
    suite.record("padding", cell, dataset="d", name="out", shape=[4, 5], failures=[FAILURE], isclose_pct=10.0)
    assert False, f"{cell.id}: rows [0] padded to 8 and to 16: {HEADLINE}"


ACCURACY = "accuracy over n=64: top-1 60.00% < 70.00% required"


@pytest.mark.accuracy
def test_accuracy_declared(accuracy_cell, suite):  # judged on the model's first output
    if accuracy_cell.engine == "onnxruntime":
        suite.record("accuracy", accuracy_cell, dataset="d", n=64, top1=0.6,
                     failures=["top-1 60.00% < 70.00% required"])
        assert False, f"{accuracy_cell.id} on d: {ACCURACY}"


@pytest.mark.accuracy
def test_accuracy_undeclared_figure(accuracy_cell, suite):
    if accuracy_cell.engine == "onnxruntime":
        failures = ["top-1 60.00% < 70.00% required", "top-5 80.00% < 90.00% required"]
        suite.record("accuracy", accuracy_cell, dataset="d", n=64, top1=0.6, top5=0.8, failures=failures)
        assert False, f"{accuracy_cell.id} on d: accuracy over n=64: {'; '.join(failures)}"


@pytest.fixture
def breaks_in_teardown():
    yield
    raise AssertionError(f"output 'out' (4, 5): {FAILURE}")


def test_teardown(cell, suite, breaks_in_teardown):
    _record(suite, cell)


def test_declared_then_teardown(cell, suite, breaks_in_teardown):  # issue 43: the known failure hid the teardown's
    _record(suite, cell)
    assert False, f"{cell.id} on d: {HEADLINE}"


def test_further_gone(cell, suite):  # issue 43: the declared figure, below the entry's floor (10 - 5)
    failure = "isclose 4.00% < 99.00% required (rtol=0.001, atol=1e-05)"
    _record(suite, cell, failure=failure, isclose_pct=4.0)
    assert False, f"{cell.id} on d: output 'out' (4, 5): {failure}"


def test_declared_on_its_data_set(cell, suite):  # expected_on: 1 % on sparse inputs is the declared 2 - 1.5
    failure = "isclose 1.00% < 99.00% required (rtol=0.001, atol=1e-05)"
    _record(suite, cell, failure=failure, isclose_pct=1.0, dataset="generated:sparse")
    assert False, f"{cell.id} on sparse inputs: output 'out' (4, 5): {failure}"


def test_further_gone_on_its_data_set(cell, suite):  # below expected_on's floor (2 - 1.5) on its data set
    failure = "isclose 0.20% < 99.00% required (rtol=0.001, atol=1e-05)"
    _record(suite, cell, failure=failure, isclose_pct=0.2, dataset="generated:sparse")
    assert False, f"{cell.id} on sparse inputs: output 'out' (4, 5): {failure}"


def test_data_set_depth_elsewhere(cell, suite):  # 1 % on another data set: beyond expected's floor (10 - 5)
    failure = "isclose 1.00% < 99.00% required (rtol=0.001, atol=1e-05)"
    _record(suite, cell, failure=failure, isclose_pct=1.0, dataset="generated:normal")
    assert False, f"{cell.id} on normal inputs: output 'out' (4, 5): {failure}"


@pytest.mark.accuracy
def test_accuracy_further_gone(accuracy_cell, suite):
    if accuracy_cell.engine == "onnxruntime":
        suite.record("accuracy", accuracy_cell, dataset="d", n=64, top1=0.5,
                     failures=["top-1 50.00% < 70.00% required"])
        assert False, f"{accuracy_cell.id} on d: accuracy over n=64: top-1 50.00% < 70.00% required"
'''


def test_only_the_declared_assertion_is_absorbed(tmp_path: Path) -> None:
    (tmp_path / "known.toml").write_text(_CONFIG)
    tests = tmp_path / "test_synthetic_known.py"
    tests.write_text(_TESTS)
    done = run_suite(tmp_path, "--suite-config", str(tmp_path / "known.toml"), "--suite-results",
                     str(tmp_path / "results.json"), tests=(str(tests),), env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, explain(done)
    states = {k.rpartition("::")[2]: v for k, v in
              json.loads((tmp_path / "results.json").read_text())["verdict"]["states"].items()}
    assert states == {
        "test_declared[m-onnxruntime-fp32]": "failed (known failure)",
        "test_value_error[m-onnxruntime-fp32]": "failed",
        "test_another_assertion[m-onnxruntime-fp32]": "failed",
        "test_nothing_recorded[m-onnxruntime-fp32]": "failed",
        "test_an_undeclared_output_recorded[m-onnxruntime-fp32]": "failed",
        "test_teardown[m-onnxruntime-fp32]": "failed",
        "test_declared_then_teardown[m-onnxruntime-fp32]": "failed",
        "test_further_gone[m-onnxruntime-fp32]": "failed",
        "test_declared_on_its_data_set[m-onnxruntime-fp32]": "failed (known failure)",
        "test_further_gone_on_its_data_set[m-onnxruntime-fp32]": "failed",
        "test_data_set_depth_elsewhere[m-onnxruntime-fp32]": "failed",
        "test_accuracy_further_gone[m-onnxruntime-fp32]": "failed",
        "test_accuracy_further_gone[m-torch-fp32]": "passed",
        "test_declared_padding[m-onnxruntime-fp32]": "failed (known failure)",
        "test_accuracy_declared[m-onnxruntime-fp32]": "failed (known failure)",
        "test_accuracy_declared[m-torch-fp32]": "passed",
        "test_accuracy_undeclared_figure[m-onnxruntime-fp32]": "failed",
        "test_accuracy_undeclared_figure[m-torch-fp32]": "passed",
    }, explain(done)
    out = done.stdout
    for why in ("this failure is an exception (ValueError), not a check's failed figures",
                "this failure does not state the figures the check recorded as failed (another assertion)",
                "this failure states no failed figure of an output, so it is not the declared failure",
                "this failure has failed figures the entry does not declare (output 'other': isclose_pct;",
                "this failure failed in teardown, not in the check itself",
                "this failure has failed figures the entry does not declare (output 'out': top5;",
                "this failure has isclose_pct of output 'out' at 4, beyond the declared 10 - 5 (the entry's floor 5): "
                "it failed further than the known failure",
                "this failure has isclose_pct of output 'out' at 0.2, beyond the declared 2 on generated:sparse - 1.5 "
                "(the entry's floor 0.5)",
                "this failure has isclose_pct of output 'out' at 1, beyond the declared 10 - 5 (the entry's floor 5)",
                "this failure has top1 of output 'out' at 0.5, beyond the declared 0.6 - 0.05 (the entry's floor "
                "0.55)"):
        assert why in out, f"{why!r} not said\n{explain(done)}"
