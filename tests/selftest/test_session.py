"""The session's records: kept in memory for the report, and streamed so a killed run keeps them."""

import json

import pytest

from core.cache import ArtifactCache
from suite.config import parse_config
from suite.session import Cell, SuiteSession

pytestmark = pytest.mark.selftest

CONFIG = {"models": {"m": {"factory": "tests.selftest.tiny_models:two_input_net", "outputs": ["out"],
                           "inputs": [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3]}]}}}


def test_records_stream_one_json_line_each_as_they_are_made(tmp_path):
    session = SuiteSession(parse_config(CONFIG), ArtifactCache(tmp_path / "cache"))
    stream = tmp_path / "out" / "results.json.partial.jsonl"
    session.stream_records_to(stream)
    cell = Cell("m", "onnxruntime", "fp16")
    session.record("parity", cell, isclose_pct=99.5)
    assert [json.loads(line)["isclose_pct"] for line in stream.read_text().splitlines()] == [99.5]
    session.record("accuracy", cell, top1=0.97)
    lines = [json.loads(line) for line in stream.read_text().splitlines()]
    assert [r["kind"] for r in lines] == ["parity", "accuracy"] and lines[1]["cell"] == "m-onnxruntime-fp16"
    assert session.records == lines


def test_cells_cover_every_engine_and_precision_and_know_the_reference(tmp_path):
    config = parse_config({"models": {"m": {**CONFIG["models"]["m"], "engines": ["torch", "onnxruntime"],
                                            "precisions": ["fp32", "fp16"]}}})
    cells = SuiteSession(config, ArtifactCache(tmp_path)).cells()
    assert {c.id for c in cells} == {"m-torch-fp32", "m-torch-fp16", "m-onnxruntime-fp32", "m-onnxruntime-fp16"}
    assert [c.id for c in cells if c.is_reference] == ["m-torch-fp32"]


def test_harness_overhead_pairs_both_calls_every_round_in_alternating_order():
    from tests.latency.test_harness_overhead import _PairedRound

    calls = []

    class _Timed:  # the suite's TimedCall, as far as a round uses it
        def __call__(self):
            calls.append("suite")

        def launch_cover(self):
            return None  # a host-timed path: nothing queued ahead of it

        def setup(self):
            pass  # the audit's copy and the next feed, outside every timing (suite.timing.TimedCall.setup)

        def restage_current(self):
            pass  # the same feed copied in again before the bare call (suite.timing.TimedCall.restage_current)

    paired = _PairedRound(_Timed(), lambda: calls.append("bare"), events=False)
    for _ in range(4):
        paired()
    assert calls == ["suite", "bare", "bare", "suite", "suite", "bare", "bare", "suite"]
    assert len(paired.bare_s) == len(paired.suite_host_s) == 4 and min(paired.bare_s) >= 0
