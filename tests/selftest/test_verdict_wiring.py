"""The states suite/hooks/verdict_wiring.py decides itself (the rest of it is pytest plumbing, tested by suite runs): a
known failure none of whose tests failed as declared fails the run (strict), and a required engine that ran nowhere
fails it. Unit tests, no suite run: tools/mutation.sh runs them against these functions' mutants."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from suite import verdict
from suite.config import parse_config
from suite.hooks.verdict_wiring import VerdictPlugin, _required_engines_judged

pytestmark = pytest.mark.selftest

MODEL = {"factory": "fixtures.models.digits:digits_cnn", "outputs": ["logits"],
         "inputs": [{"name": "image", "shape": [1, 28, 28]}], "engines": ["torch", "onnxruntime"]}
PARITY, LATENCY = "tests/parity/test_parity.py::test_parity", "tests/latency/test_latency.py::test_latency"


def test_a_known_failure_none_of_whose_tests_failed_as_declared_fails_the_run() -> None:
    plugin = VerdictPlugin(config=None)  # type: ignore[arg-type]
    plugin.known = {"m-b": {"as declared": 0, "passed": 2}, "m-a": {"as declared": 0, "passed": 1},
                    "m-c": {"as declared": 1, "passed": 3}, "m-d": {"as declared": 0, "passed": 0}}
    ledger = verdict.Ledger()
    plugin._strict_known_failures(ledger)
    assert list(ledger.checks) == ["known failure m-a", "known failure m-b"]  # in the entries' order
    check = ledger.checks["known failure m-b"]
    assert check.state == verdict.FAILED and check.detail == (
        "[XPASS(strict)] all 2 tests this known failure covers passed: the engine was fixed; remove the entry from "
        "known_failures")


def _state(required: dict[str, str], collected: list[str]) -> SimpleNamespace:
    return SimpleNamespace(config=parse_config({"models": {"m": MODEL}}), required_by=required, collected=collected,
                           left_out={"tensorrt": "--engines torch,onnxruntime"})


def _ledger(**checks: str) -> verdict.Ledger:
    """Checks by id: "passed", or the not-judged reason."""
    ledger = verdict.Ledger()
    for nodeid, how in checks.items():
        ledger.add(nodeid, verdict.PASSED) if how == "passed" else ledger.add(nodeid, verdict.NOT_JUDGED, how,
                                                                               detail=f"{how} here")
    return ledger


def _failed(ledger: verdict.Ledger) -> dict[str, str]:
    return {k: c.detail for k, c in ledger.checks.items() if c.state == verdict.FAILED}


def test_a_required_engine_none_of_whose_checks_was_collected_fails_unless_the_run_stopped() -> None:
    torch_id = f"{PARITY}[m-torch-fp32]"
    ledger = _ledger(**{torch_id: "passed"})
    state = _state({"onnxruntime": "[run] requires"}, [torch_id, "tests/selftest/test_x.py::test_y"])
    _required_engines_judged(state, ledger)  # type: ignore[arg-type]
    assert ledger.left_out == {"tensorrt": "--engines torch,onnxruntime"}
    assert _failed(ledger) == {"required engine onnxruntime": (
        "onnxruntime is required ([run] requires) and none of its checks was collected (-k or -m left them all out); "
        "to leave a required engine out, name the engines to run with --engines")}
    both = _ledger(**{torch_id: "passed"})  # each required engine is held, not only the first
    _required_engines_judged(_state({"inductor": "a", "onnxruntime": "b"}, [torch_id]), both)  # type: ignore[arg-type]
    assert list(_failed(both)) == ["required engine inductor", "required engine onnxruntime"]
    stopped = _ledger(**{torch_id: "passed"})
    stopped.interrupted = "SIGINT"
    _required_engines_judged(state, stopped)  # type: ignore[arg-type]
    assert _failed(stopped) == {}
    nothing = _ledger()  # no engine's check collected at all (only self-tests): nothing to hold the engine to
    _required_engines_judged(_state({"onnxruntime": "x"}, ["tests/selftest/test_x.py::test_y"]), nothing)  # type: ignore[arg-type]
    assert _failed(nothing) == {}


def test_a_required_engine_whose_collected_checks_all_could_not_run_fails() -> None:
    ids = [f"{PARITY}[m-onnxruntime-fp32]", f"{LATENCY}[m-onnxruntime-fp32-bs1]"]
    ledger = _ledger(**dict.fromkeys(ids, "unavailable"))
    _required_engines_judged(_state({"onnxruntime": "--engines"}, ids), ledger)  # type: ignore[arg-type]
    assert _failed(ledger) == {"required engine onnxruntime": (
        "onnxruntime is required (--engines) and none of its 2 checks could run (not judged: unavailable; e.g. "
        "unavailable here)")}
    one_ran = _ledger(**{ids[0]: "unavailable", ids[1]: "passed"})
    _required_engines_judged(_state({"onnxruntime": "--engines"}, ids), one_ran)  # type: ignore[arg-type]
    assert _failed(one_ran) == {}


@pytest.mark.parametrize("judged, held", [
    ({f"{PARITY}[m-onnxruntime-fp32]": "passed"}, False),  # torch ran as the reference of a judged parity check
    ({"tests/accuracy/test_accuracy.py::test_top1[m-onnxruntime-fp32]": "passed"}, False),  # or an accuracy one
    ({f"{PARITY}[m-onnxruntime-fp32]": "unavailable"}, True),  # no judged check: torch ran nowhere
    ({f"{LATENCY}[m-onnxruntime-fp32-bs1]": "passed"}, True),  # a latency check needs no reference
])
def test_the_reference_engine_ran_wherever_an_accuracy_or_parity_check_was_judged(judged: dict[str, str],
                                                                                   held: bool) -> None:
    torch_id = f"{PARITY}[m-torch-fp32]"
    ledger = _ledger(**{torch_id: "unsupported"}, **judged)
    _required_engines_judged(_state({"torch": "the reference"}, [torch_id, *judged]), ledger)  # type: ignore[arg-type]
    assert list(_failed(ledger)) == (["required engine torch"] if held else [])


def test_a_self_test_whose_parameters_hold_a_cell_in_brackets_belongs_to_no_engine() -> None:
    from suite.hooks.verdict_wiring import _engine_of

    config = parse_config({"models": {"m": MODEL}})
    assert _engine_of("tests/selftest/test_config.py::test_y[raw[m-torch-fp32]]", config) is None
    assert _engine_of(f"{LATENCY}[m-onnxruntime-fp32-shape[1]]", config) == "onnxruntime"
