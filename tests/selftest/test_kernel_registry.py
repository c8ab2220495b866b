"""ONNX Runtime's kernel registry predicts, before any build, a cell that would compute nothing in its precision
(issue 47: a fresh clone's first CPU run collected 24 checks only to leave them not judged). The end-to-end
behaviour (left out, named back in, the recorded census outranking the prediction) is
tests/selftest/test_not_collected.py's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engines.onnx.precision_census import kind_of
from engines.onnxrt import kernel_registry
from engines.onnxrt.kernel_registry import EXPORTED_MATMUL_OPS, kernels_for, no_compute_kernels
from engines.ort_import import import_onnxruntime

pytestmark = pytest.mark.selftest


def test_every_exported_matmul_op_is_one_the_census_counts_as_conv_gemm_matmul() -> None:
    assert {kind_of(op) for op in EXPORTED_MATMUL_OPS} == {"matmul"}


def test_the_cpu_ep_of_the_installed_onnxruntime_has_no_fp16_conv_gemm_or_matmul() -> None:
    """What the census measured (0 of 4, 50 and 48 conv/gemm/matmul nodes in fp16), read from the registry."""
    version = import_onnxruntime().__version__
    assert no_compute_kernels("cpu", "fp16") == (
        f"named fp16 but computes nothing in fp16 here (onnxruntime {version}'s CPUExecutionProvider registers no "
        "float16 kernel for any conv/gemm/matmul op)")
    assert {"Conv", "Gemm", "MatMul"} <= (kernels_for("CPUExecutionProvider", "tensor(float)") or set())
    assert no_compute_kernels("cpu", "fp32") is None and no_compute_kernels("cpu", "int8") is None


def _registry(monkeypatch: pytest.MonkeyPatch, *kernels: tuple[str, str, str]) -> None:
    defs = [SimpleNamespace(op_name=op, provider=provider, type_constraints={"T": [element_type]})
            for op, provider, element_type in kernels]
    fake = SimpleNamespace(__version__="9.9.9", capi=SimpleNamespace(
        onnxruntime_pybind11_state=SimpleNamespace(get_all_opkernel_def=lambda: defs)))
    monkeypatch.setattr(kernel_registry, "import_onnxruntime", lambda: fake)


@pytest.mark.parametrize("kernels,predicted", [
    ((("Conv", "CPUExecutionProvider", "tensor(float)"), ("Attention", "CPUExecutionProvider", "tensor(float16)")),
     True),   # fp16 attention only comes from a fusion tool: a plain export's convs still run fp32
    ((("Conv", "CPUExecutionProvider", "tensor(float)"), ("NhwcFusedConv", "CPUExecutionProvider", "tensor(float16)")),
     False),  # a release with an fp16 conv (ARM builds): collected, the census decides
    ((("MatMul", "CPUExecutionProvider", "tensor(float16)"),), False),
    ((("Conv", "CUDAExecutionProvider", "tensor(float16)"),), False),  # no CPU kernel at all: cannot tell
    ((), False),
])
def test_a_prediction_needs_the_registry_to_show_no_such_kernel(monkeypatch: pytest.MonkeyPatch, kernels,
                                                                 predicted: bool) -> None:
    _registry(monkeypatch, *kernels)
    assert (no_compute_kernels("cpu", "fp16") is not None) is predicted


def test_only_the_cpu_ep_is_predicted(monkeypatch: pytest.MonkeyPatch) -> None:
    _registry(monkeypatch, ("Conv", "CUDAExecutionProvider", "tensor(float)"))
    assert no_compute_kernels("cuda", "bf16") is None and no_compute_kernels("cuda", "fp16") is None


def test_a_registry_that_cannot_be_read_predicts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_registry, "import_onnxruntime", lambda: SimpleNamespace(capi=SimpleNamespace()))
    assert no_compute_kernels("cpu", "fp16") is None

    def absent():
        raise ImportError("no onnxruntime")

    monkeypatch.setattr(kernel_registry, "import_onnxruntime", absent)
    assert no_compute_kernels("cpu", "fp16") is None
