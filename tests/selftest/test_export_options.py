"""[models.NAME.export]: the way out for a real model the default (dynamo) exporter rejects, and every export
option reaching the exporter and the export's cache key."""

import json

import numpy as np
import onnx
import pytest
import torch

from core.cache import ArtifactCache
from core.cache_manifest import MANIFEST
from core.inputs import synthetic_feed
from engines.base import EngineBuildError
from metrics import compare_outputs
from suite.config import parse_config
from suite.session import Cell, SuiteSession

pytestmark = pytest.mark.selftest

CELL = Cell("m", "onnxruntime", "fp32")


class RescalesWhenOutOfRange(torch.nn.Module):
    """Rescales its input only when it leaves [-1, 1]: data-dependent control flow, which torch.export (the dynamo
    exporter) refuses ("could not guard on data-dependent expression"), while TorchScript tracing records the
    branch its sample takes. Every configured input lies in [0, 1], so the traced graph is the model on them.

    ``traced_batches``: the batch of each forward made while an ONNX export runs, to see what the exporter traced.
    """

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)
        self.traced_batches: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():
            self.traced_batches.append(int(x.shape[0]))
        peak = x.abs().max()
        if peak > 1:
            x = x / peak
        return self.fc(x)


def rescales_when_out_of_range(cache=None) -> torch.nn.Module:
    return RescalesWhenOutOfRange().eval()


def _session(tmp_path, name="cache", **model):
    entry = {"factory": "tests.selftest.test_export_options:rescales_when_out_of_range", "outputs": ["y"],
             "inputs": [{"name": "x", "shape": [4]}], "batch_sizes": [1, 4, 8], "engines": ["torch", "onnxruntime"],
             **model}
    return SuiteSession(parse_config({"models": {"m": entry}}), ArtifactCache(tmp_path / name), "cpu")


def _export_key(path):
    """The export options recorded in the cache key of the ONNX entry ``path`` lies in."""
    return json.loads((path.parent / MANIFEST).read_text())["key"]["export"]


def test_a_model_dynamo_rejects_fails_by_default_and_exports_with_torchscript(tmp_path):
    rejected = _session(tmp_path, "dynamo")
    with pytest.raises(EngineBuildError, match=r"ONNX export of model 'm' failed \(\{'opset': 18, 'exporter': "
                                               r"'dynamo'.*TorchExportError: Failed to export the model with "
                                               r"torch\.export"):
        rejected.engine(CELL)

    session = _session(tmp_path, "torchscript", export={"exporter": "torchscript"})
    feed = synthetic_feed(session.model("m").inputs, 8, "uniform", seed=1)
    outputs = session.run_batched(CELL, feed)
    reference = session.run_batched(session.reference_cell("m"), feed)
    report = compare_outputs(reference, outputs, session.model("m").tolerance("fp32"))["y"]
    assert report.passed, report.explain()
    assert _export_key(session.engine(CELL).artifact)["exporter"] == "torchscript"


def test_opset_and_sample_batch_reach_the_exporter_and_the_cache_key(tmp_path):
    session = _session(tmp_path, export={"exporter": "torchscript", "opset": 13, "sample_batch": 3})
    path = session.build("m").onnx_path("fp32")
    assert [o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx")] == [13]
    assert set(session.build("m").torch_module().traced_batches) == {3}
    assert _export_key(path) == {"opset": 13, "exporter": "torchscript", "sample_batch": 3, "revision": 2}
    other = _session(tmp_path, export={"exporter": "torchscript"}).build("m").onnx_path("fp32")
    assert other.parent != path.parent and _export_key(other)["opset"] == 18


def test_an_opset_the_dynamo_exporter_does_not_write_is_an_error_not_a_silent_18(tmp_path):
    """torch 2.14's dynamo exporter, asked for opset 11, writes opset 18: the key would be read and ignored."""
    entry = {"factory": "tests.selftest.tiny_models:two_input_net", "outputs": ["out"],
             "inputs": [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3]}],
             "export": {"opset": 11}}
    session = SuiteSession(parse_config({"models": {"m": entry}}), ArtifactCache(tmp_path), "cpu")
    with pytest.raises(EngineBuildError, match=r"^ONNX export of model 'm': asked for opset 11, the dynamo exporter "
                                               r"wrote opset 18 \(the torchscript exporter writes older opsets\)$"):
        session.build("m").onnx_path("fp32")


def test_static_batch_with_the_torchscript_exporter_fixes_the_batch_it_traced_at(tmp_path):
    session = _session(tmp_path, static_batch=True, export={"exporter": "torchscript"})
    runner = session.engine(CELL).runner
    feed = synthetic_feed(session.model("m").inputs, 4, "uniform", seed=2)
    np.testing.assert_allclose(runner.infer(feed)["y"], session.run_batched(session.reference_cell("m"), feed)["y"],
                               rtol=1e-5, atol=1e-6)
    for batch in (8, 4):
        graph = onnx.load(str(runner.engines[batch].artifact)).graph
        assert [v.type.tensor_type.shape.dim[0].dim_value for v in (*graph.input, *graph.output)] == [batch, batch]
    assert set(session.build("m").torch_module().traced_batches) == {8, 4}
