"""The fingerprint of a traced graph: what an export computes, as the exporter saw it.

Why (issue 43): the export's cache key held the model's weights, its classes' sources and its attributes to depth 4.
A factory that set a ``functools.partial`` keyword, a lambda's closure, a module global or a config nested five
dicts deep, or an edited helper function in another file, changed the exported graph and none of these; a warm cache
then reused the old ONNX file and passed where a fresh one failed. Listing more places cannot end that. The graph the
exporter translates can: every op, every scalar baked into it and every tensor constant, whatever Python put them
there. So the export's key holds this digest of the traced graph (engines/onnx/export.py traces it the way the
exporter does), and a cached file is reused only for the graph it was made from.

What is hashed: the code of the graph and of its subgraphs, its signature (which input is which weight, buffer or
constant) and the ranges of its dynamic axes, and the bytes of every constant the trace lifted (tensors a forward
creates, non-persistent buffers). Parameters and persistent buffers are named with their dtype and shape here: their
bytes are the model digest's, which sits beside this one in the key. Nothing that holds a memory address, a file path
or a line number is hashed, so the digest is the same in every process and on every host.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import torch


def program_digest(program: Any) -> str:
    """sha256 of a ``torch.export.ExportedProgram`` (the dynamo exporter's first step)."""
    h = hashlib.sha256()
    for name, sub in program.graph_module.named_modules():
        if isinstance(sub, torch.fx.GraphModule):  # the root and each control-flow body (cond, while_loop)
            h.update(f"graph {name}\n{sub.code}\n".encode())
    h.update(f"signature\n{program.graph_signature}\n".encode())
    ranges = sorted(f"{symbol}: {bounds}" for symbol, bounds in program.range_constraints.items())
    h.update(("ranges\n" + "\n".join(ranges) + "\n").encode())
    for name, value in sorted(program.constants.items()):
        h.update(f"constant {name}\n".encode())
        h.update(_tensor_bytes(value) if isinstance(value, torch.Tensor) else _qualname(type(value)).encode())
    for name, tensor in sorted(program.state_dict.items()):
        h.update(f"weight {name}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
    return h.hexdigest()


def script_graph_digest(graph: Any) -> str:
    """sha256 of a TorchScript trace graph (``torch._C.Graph``, the torchscript exporter's first step): its text
    without source locations (file paths and line numbers), and the bytes of each tensor constant, which the text
    shows only when small."""
    h = hashlib.sha256(graph.str(False).encode())
    for node in _script_nodes(graph):
        if node.kind() == "prim::Constant" and node.hasAttribute("value") and node.kindOf("value") == "t":
            h.update(_tensor_bytes(node.t("value")))
    return h.hexdigest()


def _script_nodes(graph: Any) -> Iterator[Any]:
    for node in graph.nodes():
        yield node
        for block in node.blocks():
            yield from _script_nodes(block)


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    t = tensor.detach().cpu().contiguous()
    header = f"{t.dtype}:{tuple(t.shape)}:".encode()
    # reshape first: a 0-dim tensor cannot be viewed as bytes
    return header + (t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
