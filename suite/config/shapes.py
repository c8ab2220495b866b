"""A model's inputs and shapes: ``inputs = [{ name, shape, dtype, low, high, role }]``, the named axes of
``[models.NAME.axes]`` and the ``latency_shapes`` timed.

Why a module of its own: an input's declaration becomes ``core.inputs.InputSpec``, part of every cache key, and
its checks (dtypes, bounds that fit the dtype and a float, axes declared and in range) are many and its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from core.inputs import INPUT_ROLES, AxisRange, InputSpec
from engines.base import BATCH_AXIS
from suite.config.schema import (
    INPUT_DTYPES,
    ConfigError,
    LatencyShape,
)
from suite.config.validate import (
    check_choice,
    check_keys,
    read_int,
    read_list,
    read_number,
    read_string,
    read_table,
)

#: A named axis: a letter, then letters, digits and underscores (it becomes a torch.export Dim and an ONNX dim).
_AXIS_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_INPUT_KEYS = {"name", "shape", "dtype", "low", "high", "role"}
_AXIS_KEYS = {"min", "opt", "max"}


def _parse_axes(where: str, table: Any) -> dict[str, AxisRange]:
    """[models.NAME.axes]: ``seq = { min = 16, opt = 128, max = 256 }``, one per named axis (opt: default max)."""
    out: dict[str, AxisRange] = {}
    for name, spec in read_table(where, table).items():
        at = f"{where}.{name}"
        if not _AXIS_NAME.match(name) or name == BATCH_AXIS:
            raise ConfigError(f"{at}: {name!r} is not an axis name: a letter, then letters, digits or _, and not "
                              f"{BATCH_AXIS!r} (the batch axis is batch_sizes)")
        spec = read_table(at, spec)
        check_keys(at, spec, _AXIS_KEYS)
        for required in ("min", "max"):
            if required not in spec:
                raise ConfigError(f"{at}: missing required key {required!r}; the form is "
                                  f"{name} = {{ min = 16, opt = 128, max = 256 }}")
        lo = read_int(f"{at}.min", spec["min"], lo=1, what="a length")
        hi = read_int(f"{at}.max", spec["max"], lo=1, what="a length")
        opt = read_int(f"{at}.opt", spec["opt"], lo=1, what="a length") if "opt" in spec else hi
        if not lo <= opt <= hi:
            raise ConfigError(f"{at}: min {lo}, opt {opt}, max {hi}; the shape profile needs min <= opt <= max")
        out[name] = AxisRange(lo, opt, hi)
    return out


def _parse_latency_shapes(where: str, value: Any, batches: tuple[int, int],
                          axes: Mapping[str, AxisRange]) -> tuple[LatencyShape, ...]:
    """``[{ batch = 1, seq = 128 }, ...]``: every case names its batch and a length for each named axis, each
    within the profile (a shape outside it would time an engine that rejects it, or one rebuilt for it)."""
    form = "{ " + ", ".join(["batch = 1", *(f"{a} = {r.opt}" for a, r in axes.items())]) + " }"
    shapes: list[LatencyShape] = []
    for i, item in enumerate(read_list(where, value)):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: expected a table like {form}, got {item!r}")
        check_keys(at, item, {BATCH_AXIS, *axes})
        missing = [k for k in (BATCH_AXIS, *axes) if k not in item]
        if missing:
            raise ConfigError(f"{at}: missing {', '.join(missing)}; each latency shape names the batch and every "
                              f"axis: {form}")
        batch = read_int(f"{at}.batch", item[BATCH_AXIS], lo=1, what="a batch size")
        if not batches[0] <= batch <= batches[1]:
            raise ConfigError(f"{at}.batch: {batch} is outside batch_sizes' range {batches[0]}..{batches[1]}")
        dims = []
        for name, r in axes.items():
            length = read_int(f"{at}.{name}", item[name], lo=1, what="a length")
            if not r.min <= length <= r.max:
                raise ConfigError(f"{at}.{name}: {length} is outside axis {name!r}'s range {r.min}..{r.max}")
            dims.append((name, length))
        shapes.append(LatencyShape(batch, tuple(dims)))
    repeated = sorted({s.id for s in shapes if shapes.count(s) > 1})
    if repeated:
        raise ConfigError(f"{where}: {repeated} listed more than once")
    return tuple(shapes)


def _parse_input(where: str, spec: Any, axes: Mapping[str, AxisRange] | None = None,
                 axes_where: str = "axes") -> InputSpec:
    axes = axes or {}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a table like {{name=..., shape=[...]}}, got {spec!r}")
    check_keys(where, spec, _INPUT_KEYS)
    if "name" not in spec or "shape" not in spec:
        raise ConfigError(f"{where}: needs name and shape (without the batch axis)")
    name = read_string(f"{where}.name", spec["name"])
    shape = tuple(_dimension(f"{where}.shape[{j}]", d, axes, axes_where)
                  for j, d in enumerate(read_list(f"{where}.shape", spec["shape"], allow_empty=True)))
    dtype_name = read_string(f"{where}.dtype", spec.get("dtype", "float32"))
    try:
        dtype = np.dtype(dtype_name)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.name not in INPUT_DTYPES:
        raise ConfigError(f"{where}.dtype: unknown dtype {dtype_name!r}; valid: {', '.join(INPUT_DTYPES)}")
    low = read_number(f"{where}.low", spec.get("low", 0.0))
    high = read_number(f"{where}.high", spec.get("high", 1.0))
    if not low < high:
        raise ConfigError(f"{where}: low {low!r} must be below high {high!r} (synthetic inputs are drawn between)")
    if dtype.kind == "b":
        for key, value in (("low", low), ("high", high)):
            if value not in (0, 1):
                raise ConfigError(f"{where}.{key}: {value!r}; a bool input takes low = 0 and high = 1 (the default)")
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        for key, value in (("low", low), ("high", high)):
            if not float(value).is_integer() or not info.min <= value <= info.max:
                raise ConfigError(f"{where}.{key}: {value!r} is not an integer within {dtype.name} "
                                  f"[{info.min}, {info.max}]")
            # The bounds are held as floats (InputSpec.low/high, part of every cache key), exact up to 2**53: the
            # rounded bound must fit too (int64's max, 2**63 - 1, rounds to 2**63, past it).
            if not info.min <= float(value) <= info.max:
                usable = int(np.nextafter(float(info.max), 0.0))  # only a max can round past its type's range
                raise ConfigError(f"{where}.{key}: {value!r} is held as the float {float(value):.17g}, outside "
                                  f"{dtype.name} [{info.min}, {info.max}] (input bounds are floats, exact up to "
                                  f"2**53); use at most {usable}")
    else:
        limit = float(np.finfo(dtype).max)
        for key, value in (("low", low), ("high", high)):
            if abs(value) > limit:
                raise ConfigError(f"{where}.{key}: {value!r} does not fit in {dtype.name} (max {limit:g})")
        # Synthetic values are low + (high - low) * u, in float64: the width must be a finite number.
        if not math.isfinite(float(high) - float(low)):
            raise ConfigError(f"{where}: low {low!r} to high {high!r} is wider than a float64 can hold (high - low "
                              f"overflows, and synthetic inputs are drawn across it); narrow the range")
    role = read_string(f"{where}.role", spec.get("role", "values"))
    check_choice(f"{where}.role", role, INPUT_ROLES)
    if role == "attention_mask":
        if dtype.kind not in "iu" or (low, high) != (0, 1):
            raise ConfigError(f"{where}: role attention_mask needs an integer dtype and low = 0, high = 1 (its "
                              f"values are 1 for a token, 0 for padding), got {dtype.name} in [{low:g}, {high:g}]")
        if not shape or not isinstance(shape[-1], str):
            raise ConfigError(f"{where}.shape: role attention_mask needs its last axis named (the sequence, "
                              f"e.g. shape = [\"seq\"]), got {list(shape)}")
    named = tuple((d, axes[d]) for d in dict.fromkeys(d for d in shape if isinstance(d, str)))
    return InputSpec(name=name, shape=shape, dtype=dtype.name, low=float(low), high=float(high), axes=named,
                     role=role)


def _dimension(where: str, value: Any, axes: Mapping[str, AxisRange], axes_where: str) -> int | str:
    """A fixed dimension (an integer >= 1) or the name of an axis declared in [models.NAME.axes]."""
    if isinstance(value, str):
        if value not in axes:
            declared = ", ".join(axes) or "none"
            raise ConfigError(f"{where}: axis {value!r} is not declared in {axes_where} (declared: {declared}); "
                              f"add {value} = {{ min = ..., opt = ..., max = ... }} there")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        named = f" or a named axis of {axes_where} ({', '.join(axes)})" if axes else ""
        raise ConfigError(f"{where}: expected a dimension (an integer) >= 1{named}, got {value!r}")
    return value
