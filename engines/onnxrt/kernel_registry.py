"""What the installed ONNX Runtime can compute in a precision, read from its kernel registry before any build.

Why (issue 47): the precision census (engines/onnx/precision_census.py) is taken from a built engine's optimized
graph, so a fresh clone's first CPU run collected every ONNX Runtime "fp16" check only to end it 'not judged
(precision-not-run)': 24 of its 112 checks, 79 % judged. The CPU EP's registry says the same thing up front: it
registers no float16 kernel for any conv/gemm/matmul op (onnxruntime 1.32.0), so such a cell's compute nodes run in
fp32 whatever the graph says. This is the installed library's own list, not a table of ours: a release that adds the
kernels (ONNX Runtime's ARM builds have some) collects the cells again, and the census judges them as before.
"""

from __future__ import annotations

from engines.ort_import import import_onnxruntime

#: The element type a precision computes in, as the registry writes it; other precisions are not predicted.
ELEMENT_TYPE = {"fp16": "tensor(float16)", "bf16": "tensor(bfloat16)"}
#: The execution providers predicted, by the suite's name: the CPU EP alone, where the prediction was checked against
#: every census (digits_cnn, efficientnet_lite0, minilm_l6 fp16: 0 of 4, 50 and 48 nodes). The CUDA EP's cells are
#: left to their census until a GPU sitting checks the prediction there (its bf16 kernels, for one).
PROVIDER = {"cpu": "CPUExecutionProvider"}
#: The conv/gemm/matmul ops of a graph as torch exports it and ONNX Runtime's graph optimizer fuses it. Attention,
#: GroupQueryAttention and MatMulNBits (which the CPU EP has in fp16) come only from a fusion or quantization tool:
#: a cell made with one (transformer_fusion, int8) is not predicted.
EXPORTED_MATMUL_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "GRU", "LSTM", "RNN", "FusedConv",
                       "FusedGemm", "FusedMatMul", "NhwcConv", "NhwcFusedConv")


def kernels_for(provider: str, element_type: str) -> set[str] | None:
    """The op types ``provider`` registers a kernel for that takes ``element_type``; None where the registry
    cannot be read (ONNX Runtime absent, or a build without the call) or has no kernel of ``provider`` at all (a
    build without that provider: the cell is unavailable, which skip_reason says, never 'computes nothing')."""
    try:
        ort = import_onnxruntime()
        defs = [d for d in ort.capi.onnxruntime_pybind11_state.get_all_opkernel_def() if d.provider == provider]
    except (ImportError, AttributeError):
        return None
    if not defs:
        return None
    return {d.op_name for d in defs if any(element_type in types for types in d.type_constraints.values())}


def no_compute_kernels(ep: str, precision: str) -> str | None:
    """Why a plainly exported cell of ``precision`` on execution provider ``ep`` computes nothing in it: the
    provider registers no kernel of that element type for any of its conv/gemm/matmul ops (EXPORTED_MATMUL_OPS).
    None where it does, where the precision or provider is not one this predicts, or where the registry cannot be
    read (the census decides)."""
    element_type, provider = ELEMENT_TYPE.get(precision), PROVIDER.get(ep)
    if element_type is None or provider is None:
        return None
    kernels = kernels_for(provider, element_type)
    if kernels is None or kernels & set(EXPORTED_MATMUL_OPS):
        return None
    return (f"named {precision} but computes nothing in {precision} here (onnxruntime "
            f"{import_onnxruntime().__version__}'s {provider} registers no {element_type.removeprefix('tensor(')[:-1]} "
            "kernel for any conv/gemm/matmul op)")
