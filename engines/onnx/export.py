"""PyTorch -> ONNX with a dynamic batch axis (and every named axis of the inputs, such as a sequence length)
and the configured outputs in order, then onnx.checker and shape inference. A static-batch export (the
``static_batch`` option) fixes the batch axis at one size instead; named axes stay dynamic.

Why here and once: ONNX Runtime and TensorRT both consume this file, so both judge the same graph.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from core.inputs import InputSpec, synthetic_feed
from engines.base import BATCH_AXIS, ONNX_EXPORTERS, EngineBuildError, EngineFacts
from engines.feeds import pick_outputs, returned_output_names
from engines.onnx.graph_digest import program_digest, script_graph_digest

log = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
DEFAULT_EXPORT_OPTIONS: dict[str, Any] = {"opset": 18, "exporter": "dynamo", "sample_batch": 2}
_EXPORTERS = ONNX_EXPORTERS
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# Part of every export's cache key (through export_options), not an option: raised when the export code
# changes what a cached file holds. 2: dict and named-tuple outputs bound to the configured names by key
# (revision 1 bound them by position, so an older file of such a model may carry swapped names).
EXPORT_REVISION = 2


def export_options(overrides: dict[str, Any] | None = None, static_batch: int | None = None) -> dict[str, Any]:
    """The export options (defaults updated with ``overrides``) plus the export code's revision; with
    ``static_batch``, also that batch, which the export fixes and traces at (so it is the sample batch too).

    The dict is the export's cache key part: a dynamic export's keys stay what they were (no static_batch key).
    """
    opts = {**DEFAULT_EXPORT_OPTIONS, **(overrides or {})}
    unknown = set(opts) - set(DEFAULT_EXPORT_OPTIONS)
    if unknown:
        raise ValueError(f"unknown export option(s) {sorted(unknown)}; valid: {sorted(DEFAULT_EXPORT_OPTIONS)}")
    if opts["exporter"] not in _EXPORTERS:
        raise ValueError(f"export option exporter={opts['exporter']!r}; valid: {_EXPORTERS}")
    for key in ("opset", "sample_batch"):
        if isinstance(opts[key], bool) or not isinstance(opts[key], int) or opts[key] < 1:
            raise ValueError(f"export option {key}={opts[key]!r}: expected an integer >= 1")
    if static_batch is None:
        return {**opts, "revision": EXPORT_REVISION}
    if isinstance(static_batch, bool) or not isinstance(static_batch, int) or static_batch < 1:
        raise ValueError(f"static_batch={static_batch!r}: expected a batch size >= 1")
    return {**opts, "sample_batch": static_batch, "static_batch": static_batch, "revision": EXPORT_REVISION}


def sample_inputs(inputs: tuple[InputSpec, ...], batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Non-constant example inputs for tracing (a constant input can hide data-dependent paths), each in
    its configured dtype: the suite's own uniform synthetic feed, so integer ids stay integers."""
    feed = synthetic_feed(inputs, batch, "uniform", seed)
    return tuple(torch.from_numpy(feed[spec.name]) for spec in inputs)


class ConfiguredOutputs(torch.nn.Module):
    """Returns the wrapped model's outputs as a tuple in the configured order, picked by key from a dict
    or named tuple (engines.feeds.pick_outputs), so that an exported graph's output named "logits" is the
    model's "logits", whatever order the model's dict happens to have."""

    def __init__(self, module: torch.nn.Module, names: tuple[str, ...], where: str) -> None:
        super().__init__()
        self.module = module
        self.names = names
        self.where = where

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(pick_outputs(self.module(*args), self.names, self.where))


def with_configured_outputs(module: torch.nn.Module, args: tuple[torch.Tensor, ...], outputs: tuple[str, ...],
                            where: str) -> torch.nn.Module:
    """The module to export or compile: itself when it returns its outputs by position (a tensor, tuple or
    list, bound to the configured names in order), else wrapped in ConfiguredOutputs.

    Runs one eager forward on ``args`` to see what the model returns, so that a configured name the model
    does not return fails here, naming the names it does return, and not deep inside an exporter.
    """
    try:
        with torch.no_grad():
            out = module(*args)
    except Exception as exc:
        shapes = [f"{tuple(a.shape)} {a.dtype}" for a in args]
        raise EngineBuildError(f"{where}: forward on sample inputs {shapes} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
    return fit_outputs(module, out, outputs, where)


def fit_outputs(module: torch.nn.Module, out: Any, outputs: tuple[str, ...], where: str) -> torch.nn.Module:
    """with_configured_outputs' decision and checks, on what the module returned (``out``)."""
    try:
        picked = pick_outputs(out, outputs, where)
    except ValueError as exc:
        raise EngineBuildError(str(exc)) from exc
    not_tensors = {n: type(t).__name__ for n, t in zip(outputs, picked, strict=True) if not isinstance(t, torch.Tensor)}
    if not_tensors:
        raise EngineBuildError(f"{where}: configured outputs must be tensors; these are not: {not_tensors}")
    if returned_output_names(out) is None:
        return module
    return ConfiguredOutputs(module, tuple(outputs), where)


def export_dims(inputs: tuple[InputSpec, ...], min_batch: int, max_batch: int, *,
                named_as_hints: bool = False) -> dict[str, Any]:
    """One ``torch.export.Dim`` per axis: ``batch`` over [min_batch, max_batch], each named axis over its
    configured range. One object per name, so that inputs sharing an axis (token ids and their mask) are
    exported as equal in length.

    ``named_as_hints``: named axes as ``Dim.DYNAMIC(min, max)`` instead. torch.export then keeps the guards a
    compiler adds on them and still refuses to specialise them. AOTInductor needs it: on CUDA its attention
    kernel pads the sequence to a multiple of 8, and a strict Dim refuses that guard as a constraint violation
    (MiniLM on an H100). Inputs sharing a name are then equated by the graph itself."""
    dims: dict[str, Any] = {BATCH_AXIS: torch.export.Dim(BATCH_AXIS, min=min_batch, max=max_batch)}
    for spec in inputs:
        for name, r in spec.axes:
            dims.setdefault(name, torch.export.Dim.DYNAMIC(min=r.min, max=r.max) if named_as_hints
                            else torch.export.Dim(name, min=r.min, max=r.max))
    return dims


def input_dynamic_shapes(module: torch.nn.Module, inputs: tuple[InputSpec, ...],
                         dims: Mapping[str, Any], where: str = "the model") -> dict[str, Any]:
    """torch.export's ``dynamic_shapes``: axis 0 of every input is ``dims["batch"]``, a named axis of an input's
    shape is ``dims[name]``. They are keyed by forward()'s parameter names (forward_arg_names), which may differ
    from the configured input names."""
    per_input = tuple({0: dims[BATCH_AXIS], **{j: dims[d] for j, d in enumerate(spec.shape, start=1)
                                                if isinstance(d, str)}} for spec in inputs)
    if isinstance(module, ConfiguredOutputs):
        forward_arg_names(module.module, inputs, where)  # the wrapped model must take the configured inputs
        return {"args": per_input}
    return dict(zip(forward_arg_names(module, inputs, where), per_input, strict=True))


@dataclass(frozen=True)
class TracedExport:
    """The graph an export computes, traced the way its exporter traces it, and that graph's digest (part of the
    export's cache key: engines/onnx/graph_digest.py says why). ``program``: the dynamo exporter's ExportedProgram,
    which the export then translates, so the file is made from exactly the graph the key names; ``shapes``: the
    dynamic shapes it was captured with, whose names the exporter gives the file's axes."""

    digest: str
    program: Any = None
    shapes: Any = None


def trace_export(module: torch.nn.Module, model_name: str, inputs: tuple[InputSpec, ...],
                 outputs: tuple[str, ...], options: dict[str, Any]) -> TracedExport:
    """Trace ``module`` as the export with ``options`` would: the dynamo exporter's capture (torch.export, its
    strategies in its order, with the ONNX-export flag set, as ``torch.onnx.is_in_onnx_export()`` reads it), or the
    torchscript exporter's trace (with its own flag), of the module whose outputs are the configured ones
    (with_configured_outputs' rule). Raise EngineBuildError naming the model where it fails, with the message the
    export or the start-up check gives."""
    static = options.get("static_batch")
    args = sample_inputs(inputs, static or options["sample_batch"])
    where = f"model {model_name!r}"
    module = module.eval()
    if options["exporter"] == "dynamo":
        return _dynamo_trace(module, args, inputs, outputs, static, model_name, options)
    try:  # the trace runs the forward: what it returned decides the outputs, with no forward of its own
        graph, out = _script_graph(module, args, model_name, options)
        fitted = fit_outputs(module, out, outputs, where)
    except EngineBuildError:
        fitted, graph = with_configured_outputs(module, args, outputs, where), None
    if graph is None or fitted is not module:
        graph, _ = _script_graph(fitted, args, model_name, options)
    return TracedExport(script_graph_digest(graph))


def _script_graph(module: torch.nn.Module, args: tuple[torch.Tensor, ...], model_name: str,
                  options: dict[str, Any]) -> tuple[Any, Any]:
    """The torchscript exporter's trace (graph, what the module returned), with its ONNX-export flag set."""
    from torch.onnx._internal.torchscript_exporter._globals import GLOBALS

    flag = GLOBALS.in_onnx_export
    GLOBALS.in_onnx_export = True
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            return torch.jit._get_trace_graph(module, args, strict=False, _force_outplace=False)
    except Exception as exc:
        raise _export_error(model_name, options, exc) from None
    finally:
        GLOBALS.in_onnx_export = flag


def _dynamo_trace(module: torch.nn.Module, args: tuple[torch.Tensor, ...], inputs: tuple[InputSpec, ...],
                  outputs: tuple[str, ...], static: int | None, model_name: str,
                  options: dict[str, Any]) -> TracedExport:
    """The dynamo exporter's program of ``module`` as export_onnx exports it (its outputs bound to the configured
    names). The outputs are read from the captured graph, so a warm run pays no eager forward for them (about half
    of a trace's time); a capture that fails is taken again after with_configured_outputs' eager forward, whose
    errors (a forward that fails, a configured name not returned) are the start-up check's."""
    where = f"model {model_name!r}"
    dims = export_dims(inputs, 1, 4096)
    if static:
        dims[BATCH_AXIS] = torch.export.Dim.STATIC
    try:  # before the exporter: a forward() that does not fit is said as such
        shapes = input_dynamic_shapes(module, inputs, dims, where)
        program = _capture(module, args, shapes, model_name, options)
        fitted = fit_outputs(module, _returned(program), outputs, where)
    except EngineBuildError:
        fitted = with_configured_outputs(module, args, outputs, where)
        program = None
    if program is None or fitted is not module:
        shapes = input_dynamic_shapes(fitted, inputs, dims, where)
        program = _capture(fitted, args, shapes, model_name, options)
    return TracedExport(program_digest(program), program, shapes)


def _returned(program: Any) -> Any:
    """What the captured module returns, as its forward returned it (a tensor, tuple, dict, named tuple), with the
    graph's fake tensors for values; buffer mutations, which the graph returns too, left out."""
    from torch.export.graph_signature import OutputKind
    from torch.utils import _pytree

    (node,) = [n for n in program.graph.nodes if n.op == "output"]
    values = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a
              for a, spec in zip(node.args[0], program.graph_signature.output_specs, strict=True)
              if spec.kind == OutputKind.USER_OUTPUT]
    return _pytree.tree_unflatten(values, program.call_spec.out_spec)


def _capture(module: torch.nn.Module, args: tuple[torch.Tensor, ...], shapes: dict[str, Any], model_name: str,
             options: dict[str, Any]) -> Any:
    """The ExportedProgram torch.onnx.export(dynamo=True) would capture: its strategies, first success wins; where
    all fail, the error it would raise (the first strategy's, as torch.export's)."""
    from torch.onnx._internal.exporter import _capture_strategies, _core, _errors, _flags

    def capture() -> Any:
        failed: list[Exception] = []
        for strategy in _capture_strategies.CAPTURE_STRATEGIES:
            result = strategy(verbose=False)(module, args, {}, dynamic_shapes=shapes)
            if result.exported_program is not None:
                return result.exported_program
            if result.exception is not None:
                failed.append(result.exception)
        first = failed[0] if failed else RuntimeError("no capture strategy")
        raise _errors.TorchExportError(_core._STEP_ONE_ERROR_MESSAGE + _core._summarize_exception_stack(first))

    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            return _flags.set_onnx_exporting_flag(capture)()
    except Exception as exc:
        raise _export_error(model_name, options, exc) from None


def _export_error(model_name: str, options: dict[str, Any], exc: Exception) -> EngineBuildError:
    """The exporter raises many types; the message is what the user needs (its first lines; all of it in the log)."""
    message = _ANSI.sub("", str(exc)).strip()
    lines = message.splitlines()
    if len(lines) > _MESSAGE_LINES:  # the dynamo exporter's report runs to hundreds of lines
        log.error("ONNX export of %s failed; the exporter's whole message:\n%s", model_name, message)
        message = "\n".join(lines[:_MESSAGE_LINES]) + f"\n... ({len(lines) - _MESSAGE_LINES} more lines in the log)"
    # from None at the raise: the chained exporter traceback printed ~1,000 lines per test for one unsupported op
    return EngineBuildError(f"ONNX export of model {model_name!r} failed ({options}): {type(exc).__name__}: {message}")


def export_onnx(module: torch.nn.Module, model_name: str, inputs: tuple[InputSpec, ...],
                outputs: tuple[str, ...], path: Path, options: dict[str, Any],
                traced: TracedExport | None = None) -> None:
    """Export with the batch axis (fixed at ``options["static_batch"]`` where that is set) and every named axis
    dynamic and the graph's outputs in the configured order, bound by name for dict and named-tuple outputs;
    raise EngineBuildError naming the model on any failure, or when the file's opset is not the one asked.
    ``traced``: the module's trace for these options (trace_export), whose graph the dynamo exporter translates."""
    static = options.get("static_batch")
    args = sample_inputs(inputs, static or options["sample_batch"])
    names = [i.name for i in inputs]
    batch_axis = f"batch fixed at {static}" if static else "dynamic batch"
    log.info("exporting %s to ONNX (opset %s, %s exporter, %s)", model_name, options["opset"], options["exporter"],
             batch_axis)
    if options["exporter"] == "dynamo":
        traced = traced or trace_export(module, model_name, inputs, outputs, options)
    else:
        module = with_configured_outputs(module.eval(), args, outputs, f"model {model_name!r}")
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            if options["exporter"] == "dynamo":
                placeholders = [f"{_PLACEHOLDER}{i}" for i in range(len(outputs))]
                torch.onnx.export(
                    traced.program, args, str(path), input_names=names, output_names=placeholders,
                    dynamic_shapes=traced.shapes, opset_version=options["opset"], dynamo=True, external_data=False,
                    verbose=False, optimize=True,
                )
                _name_outputs(path, placeholders, outputs)
            else:
                batch = {} if static else {0: BATCH_AXIS}
                axes = {**{n: dict(batch) for n in outputs},
                        **{i.name: {**batch, **{j: d for j, d in enumerate(i.shape, start=1) if isinstance(d, str)}}
                           for i in inputs}}
                torch.onnx.export(
                    module.eval(), args, str(path), input_names=names, output_names=list(outputs),
                    dynamic_axes={n: a for n, a in axes.items() if a} or None,
                    opset_version=options["opset"], dynamo=False,
                )
    except Exception as exc:  # the exporter raises many types; the message is what the user needs
        raise _export_error(model_name, options, exc) from None
    check_onnx(path, model_name, inputs, static)
    _check_output_names(path, model_name, outputs)
    _check_opset(path, model_name, options)


def _check_opset(path: Path, model_name: str, options: dict[str, Any]) -> None:
    """The file's default-domain opset is the one asked: the dynamo exporter writes opset 18 where it cannot
    convert its graph down (asked for 11 in torch 2.14), which would make [models.NAME.export] opset a setting
    read and ignored."""
    model = onnx.load(str(path), load_external_data=False)
    got = sorted({o.version for o in model.opset_import if o.domain in ("", "ai.onnx")})
    if got != [options["opset"]]:
        hint = " (the torchscript exporter writes older opsets)" if options["exporter"] == "dynamo" else ""
        written = ", ".join(map(str, got)) or "none"
        raise EngineBuildError(f"ONNX export of model {model_name!r}: asked for opset {options['opset']}, the "
                               f"{options['exporter']} exporter wrote opset {written}{hint}")


# The dynamo exporter names values after the FX nodes that make them ("embedding" for aten.embedding, "linear",
# "add"...) and, asked for an output of such a name, gives two values that name (an invalid, non-SSA graph).
# So it exports with placeholder names, and the configured names are put in afterwards.
_MESSAGE_LINES = 12  # of an exporter failure shown in the error (the rest goes to the log)
_PLACEHOLDER = "__suite_output_"


def _name_outputs(path: Path, placeholders: list[str], outputs: tuple[str, ...]) -> None:
    """Rename the graph outputs from ``placeholders`` to ``outputs``; an inner value that already carries one of
    those names is renamed first (``NAME__inner``, numbered if taken), in every (sub)graph."""
    model = onnx.load(str(path))
    graphs = list(_graphs(model.graph))
    taken = {name for g in graphs for node in g.node for name in (*node.input, *node.output)}
    taken |= {v.name for g in graphs for v in (*g.input, *g.output, *g.value_info, *g.initializer)}
    rename: dict[str, str] = {}
    for want in outputs:
        if want in taken:
            new, n = f"{want}__inner", 1
            while new in taken:
                new, n = f"{want}__inner{n}", n + 1
            taken.add(new)
            rename[want] = new
    rename.update(zip(placeholders, outputs, strict=True))
    for g in graphs:
        for node in g.node:
            node.input[:] = [rename.get(n, n) for n in node.input]
            node.output[:] = [rename.get(n, n) for n in node.output]
        for value in (*g.output, *g.value_info):
            value.name = rename.get(value.name, value.name)
        for init in g.initializer:
            init.name = rename.get(init.name, init.name)
    onnx.save(model, str(path))


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """A graph and every subgraph of its nodes' attributes (If, Loop, Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _check_output_names(path: Path, model_name: str, outputs: tuple[str, ...]) -> None:
    """The graph's outputs are exactly the configured ones, in order: an exporter that dropped or renamed
    one would otherwise leave ONNX Runtime to fail later, or bind names to the wrong tensors."""
    got = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    if got != list(outputs):
        raise EngineBuildError(f"ONNX model of {model_name!r} has outputs {got}; the config's outputs are "
                               f"{list(outputs)}")


def forward_arg_names(module: torch.nn.Module, inputs: tuple[InputSpec, ...], where: str = "the model") -> list[str]:
    """forward()'s parameters, which the declared inputs are passed to by position, one each: a forward() with
    other parameters too (a Hugging Face model's ``token_type_ids``, ``use_cache``...) would take them into its
    first parameters whatever their names, so the counts must match, or an EngineBuildError says how to fix it.
    The start-up check (suite/preflight/) calls this too: such a model fails there, once, not in each build."""
    import inspect

    params = [p.name for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    declared = [spec.name for spec in inputs]
    if len(params) != len(declared):
        raise EngineBuildError(
            f"{where}: forward() of {type(module).__name__} takes {len(params)} parameter"
            f"{'s' if len(params) != 1 else ''} ({', '.join(params)}), the config declares {len(declared)} "
            f"input{'s' if len(declared) != 1 else ''} ({', '.join(declared)}); the dynamo ONNX export and inductor "
            f"pass the declared inputs to forward() by position, one parameter each: wrap the model so that forward() "
            f"takes exactly ({', '.join(declared)}) (README.md: 'Hugging Face models')")
    return params


def check_onnx(path: Path, model_name: str, inputs: tuple[InputSpec, ...] = (),
               static_batch: int | None = None) -> None:
    """onnx.checker (full) and strict shape inference; the batch axis must stay symbolic (or, for a static-batch
    export, be ``static_batch``), and so must each named axis of ``inputs`` whose range is more than one length."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
        model = onnx.shape_inference.infer_shapes(onnx.load(str(path)), check_type=True, strict_mode=True)
    except Exception as exc:
        raise EngineBuildError(f"ONNX model of {model_name!r} fails onnx.checker/shape inference: {exc}") from exc
    for value in model.graph.input:
        dim0 = value.type.tensor_type.shape.dim[0]
        if static_batch is not None and dim0.dim_value != static_batch:
            got = dim0.dim_value if dim0.HasField("dim_value") else repr(dim0.dim_param or "?")
            raise EngineBuildError(f"ONNX model of {model_name!r}: input {value.name!r} has a batch axis of {got}; "
                                   f"the static-batch export must fix it at {static_batch}")
        if static_batch is None and dim0.HasField("dim_value"):
            raise EngineBuildError(f"ONNX model of {model_name!r}: input {value.name!r} has a fixed batch "
                                   f"axis of {dim0.dim_value}; the export must keep it dynamic")
    specs = {spec.name: spec for spec in inputs}
    for value in model.graph.input:
        spec = specs.get(value.name)
        if spec is None:
            continue
        for j, axis in enumerate(spec.shape, start=1):
            dim = value.type.tensor_type.shape.dim[j]
            if isinstance(axis, str) and spec.axis(axis).min < spec.axis(axis).max and dim.HasField("dim_value"):
                raise EngineBuildError(f"ONNX model of {model_name!r}: input {value.name!r} has a fixed axis {j} "
                                       f"({axis!r}) of {dim.dim_value}; the export must keep it dynamic over "
                                       f"{spec.axis(axis).min}..{spec.axis(axis).max}")


_WEIGHT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                 onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8}


def _is_weight(init: onnx.TensorProto) -> bool:
    """Weights, not shape constants (int64) or a QDQ model's scales and zero points."""
    return init.data_type in _WEIGHT_TYPES and not init.name.endswith(("_scale", "_zero_point"))


def onnx_facts(path: Path) -> EngineFacts:
    """Size, node count and parameter count (weight elements, as torch counts them) of an ONNX file."""
    model = onnx.load(str(path), load_external_data=False)
    params = sum(int(np.prod(init.dims)) if len(init.dims) else 1 for init in model.graph.initializer
                 if _is_weight(init))
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return EngineFacts(artifact_bytes=path.stat().st_size, layers=len(model.graph.node), parameters=params,
                       detail={"layer_kind": "onnx nodes", "op_histogram": dict(sorted(ops.items()))})
