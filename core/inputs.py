"""Input specs (``InputSpec``: name, shape, dtype, value range, named axes) and synthetic feeds within each
input's declared range, in several value distributions.

Why several: engines break at the edges (saturating int8 scales, fp16 overflow, sparse activations),
which uniform noise alone rarely reaches. Never all-zero: a zero input can hide a broken engine and
makes latency meaningless on hardware that skips work. Never constant where the array holds two values
or more (a 1-element input at batch 1 is one number, never 0 where the range allows another). Integer
and bool inputs (token ids) get integers within [low, high] in their own dtype. Named axes (a sequence
length) take the length ``dims`` gives, else the axis's opt. An input whose role is ``attention_mask``
gets what a tokenizer makes: per row 1s then 0s (padding at the end), at least one 1 per row, row
lengths drawn in the distribution.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: What an input is: plain values drawn within [low, high], or an attention mask (per row 1s then 0s along
#: its last, named axis: the tokens a row holds, then padding), which synthetic feeds draw as such.
INPUT_ROLES: tuple[str, ...] = ("values", "attention_mask")


@dataclass(frozen=True)
class AxisRange:
    """A named dynamic axis (a sequence length): the lengths an engine must accept, and the one it is tuned
    for (TensorRT's opt; synthetic feeds' default length)."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise ValueError(f"axis range needs 1 <= min <= opt <= max, got {self}")

    def as_dict(self) -> dict[str, int]:
        return {"min": self.min, "opt": self.opt, "max": self.max}


Dims = Mapping[str, int]


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, shape without the batch axis, numpy dtype, value range for synthetic data.

    A string in ``shape`` names a dynamic axis (``"seq"``); ``axes`` holds the range of each axis the shape
    names, so that a spec alone can make a concrete shape (``batch_shape(batch, dims)``, each axis at its opt
    unless ``dims`` says otherwise). ``role`` is ``"values"`` or ``"attention_mask"``.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    low: float = 0.0
    high: float = 1.0
    axes: tuple[tuple[str, AxisRange], ...] = ()
    role: str = "values"

    def __post_init__(self) -> None:
        declared = dict(self.axes)
        missing = [d for d in self.shape if isinstance(d, str) and d not in declared]
        if missing:
            raise ValueError(f"input {self.name!r}: shape {list(self.shape)} names axes {missing} without a range "
                             f"(axes: {sorted(declared)})")
        if self.role not in INPUT_ROLES:
            raise ValueError(f"input {self.name!r}: role {self.role!r}; valid: {', '.join(INPUT_ROLES)}")

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The named axes of the shape, in order."""
        return tuple(d for d in self.shape if isinstance(d, str))

    def axis(self, name: str) -> AxisRange:
        return dict(self.axes)[name]

    def batch_shape(self, batch: int, dims: Dims | None = None) -> tuple[int, ...]:
        """The concrete shape at ``batch``: each named axis at ``dims[name]``, else at its opt."""
        given = dims or {}
        return (batch, *(int(given.get(d, self.axis(d).opt)) if isinstance(d, str) else d for d in self.shape))

    def as_key(self) -> dict[str, Any]:
        """This spec in a cache key: the fields an input without named axes always had, so that the keys of
        existing models stay what they were; axes and role only where they are set."""
        key: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "low": self.low,
                               "high": self.high}
        if self.axes:
            key["axes"] = {n: r.as_dict() for n, r in self.axes}
        if self.role != "values":
            key["role"] = self.role
        return key


DISTRIBUTIONS: tuple[str, ...] = ("uniform", "normal", "extremes", "sparse")


def synthetic_array(spec: InputSpec, batch: int, distribution: str, rng: np.random.Generator,
                    dims: Dims | None = None) -> np.ndarray:
    shape = spec.batch_shape(batch, dims)
    lo, hi = spec.low, spec.high
    dtype = np.dtype(spec.dtype)
    if spec.role == "attention_mask":
        return _attention_mask(spec, shape, distribution, rng)
    if dtype == np.bool_ or np.issubdtype(dtype, np.integer):
        return _discrete_array(spec, shape, distribution, rng)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    if distribution == "uniform":
        arr = rng.uniform(lo, hi, size=shape)
    elif distribution == "normal":
        arr = np.clip(rng.normal(mid, half / 3, size=shape), lo, hi)
    elif distribution == "extremes":
        arr = np.where(rng.random(shape) < 0.5, lo, hi) + rng.uniform(-0.01, 0.01, size=shape) * half
        arr = np.clip(arr, lo, hi)
    elif distribution == "sparse":
        background = lo if lo >= 0 else mid
        arr = np.where(rng.random(shape) < 0.1, rng.uniform(lo, hi, size=shape), background)
        if not np.any(arr != background):  # a small input (3 values at batch 1) can draw no non-background value
            arr.flat[rng.integers(arr.size)] = hi if background != hi else lo
    else:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {DISTRIBUTIONS}")
    arr = _vary(arr.astype(spec.dtype), lo, hi)  # a few values can all land on one end (extremes clipped at low = 0)
    if arr.size > 1 and not np.any(arr != arr.flat[0]):
        raise AssertionError(f"synthetic input {spec.name} came out constant ({arr.flat[0]}): [{lo:g}, {hi:g}] holds "
                             f"one {dtype} value; refusing to use it")
    return arr


def _integer_range(spec: InputSpec) -> tuple[int, int]:
    """The integers an integer or bool input may take: those within [low, high] (bool: within [0, 1]).
    A range that holds no value, or one the dtype cannot hold, is a ValueError naming the input."""
    dtype = np.dtype(spec.dtype)
    lo, hi = math.ceil(spec.low), math.floor(spec.high)
    if dtype == np.bool_:
        lo, hi = max(lo, 0), min(hi, 1)
    else:
        info = np.iinfo(dtype)
        if lo < info.min or hi > info.max:
            raise ValueError(f"input {spec.name!r}: range [{spec.low}, {spec.high}] exceeds {dtype}'s "
                             f"[{info.min}, {info.max}]")
    if lo > hi:
        raise ValueError(f"input {spec.name!r} ({dtype}): no value within [low={spec.low}, high={spec.high}]")
    return lo, hi


def _discrete_array(spec: InputSpec, shape: tuple[int, ...], distribution: str,
                    rng: np.random.Generator) -> np.ndarray:
    """Integer or bool values within [low, high], in the same distributions as floats: uniform, a rounded
    normal around the middle, the two ends, or mostly one background value (0 where the range holds it,
    like padding ids). Never constant where the range allows two values: all one value would hide an
    engine that ignores the input."""
    dtype = np.dtype(spec.dtype)
    lo, hi = _integer_range(spec)
    if lo == hi:
        raise ValueError(f"input {spec.name!r} ({dtype}): [low={spec.low}, high={spec.high}] holds the one value "
                         f"{lo}; a constant input can hide a broken engine")

    def uniform() -> np.ndarray:
        return rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64)

    if distribution == "uniform":
        arr = uniform()
    elif distribution == "normal":
        arr = np.clip(np.rint(rng.normal((lo + hi) / 2, (hi - lo) / 6, size=shape)), lo, hi).astype(np.int64)
    elif distribution == "extremes":
        arr = np.where(rng.random(shape) < 0.5, lo, hi).astype(np.int64)
    elif distribution == "sparse":
        background = 0 if lo <= 0 <= hi else (lo if lo > 0 else hi)
        arr = np.where(rng.random(shape) < 0.1, uniform(), background).astype(np.int64)
    else:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {DISTRIBUTIONS}")
    return _vary(arr, lo, hi).astype(dtype)


def _vary(arr: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``arr``, its last value set to ``hi`` (``lo`` where it already holds ``hi``) where all its values are one:
    not constant where it holds two values or more, and a single value (a 1-element input at batch 1), which
    cannot vary, not zero."""
    first = arr.flat[0]
    if np.all(arr == first) and (arr.size > 1 or first == 0):
        arr.flat[-1] = hi if first != arr.dtype.type(hi) else lo
    return arr


def _attention_mask(spec: InputSpec, shape: tuple[int, ...], distribution: str,
                    rng: np.random.Generator) -> np.ndarray:
    """Per row: ``length`` 1s, then 0s to the end of the (last, named) axis; 1 <= length <= the axis length.
    Lengths: uniform, a rounded normal around half, the two ends (1 or full), or mostly one token ("sparse").
    Where the axis holds two or more positions and there are two or more rows, one row is full and one is
    padded, so that a batch always mixes padding with none."""
    length = shape[-1]
    rows = int(np.prod(shape[:-1]))
    if distribution == "uniform":
        lengths = rng.integers(1, length, size=rows, endpoint=True)
    elif distribution == "normal":
        lengths = np.clip(np.rint(rng.normal(length / 2, length / 6, size=rows)), 1, length).astype(np.int64)
    elif distribution == "extremes":
        lengths = np.where(rng.random(rows) < 0.5, 1, length)
    elif distribution == "sparse":
        lengths = np.where(rng.random(rows) < 0.9, 1, rng.integers(1, length, size=rows, endpoint=True))
    else:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {DISTRIBUTIONS}")
    if rows >= 2 and length >= 2:
        if np.all(lengths == length):
            lengths[-1] = rng.integers(1, length)
        if np.all(lengths < length):
            lengths[0] = length
    mask = (np.arange(length)[None, :] < lengths[:, None]).reshape(shape)
    return mask.astype(spec.dtype)


def _check_dims(inputs: tuple[InputSpec, ...], dims: Dims) -> None:
    """Every length given names an axis of these inputs and lies within its range."""
    ranges = {name: r for spec in inputs for name, r in spec.axes}
    unknown = sorted(set(dims) - set(ranges))
    if unknown:
        raise ValueError(f"dims {dict(dims)}: {unknown} name no axis of the inputs (axes: {sorted(ranges) or 'none'})")
    for name, value in dims.items():
        r = ranges[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not r.min <= value <= r.max:
            raise ValueError(f"dims {name}={value!r}: outside axis {name!r}'s range {r.min}..{r.max}")


def generated_example(model: Any, distribution: str) -> tuple[int, int]:
    """(batch, seed) of a model's (a suite.config.ModelConfig's) generated parity case in one distribution:
    fixed by their names, so that the same case sees the same inputs whatever pytest collects (``-k``, ``--lf``,
    xdist); among the batches an engine was built and tuned for (a new shape would cost some engines a re-tune),
    and of 2 rows or more where the model lists such a batch: one row judges little (top-1 agreement is 0 or
    100 %, no row differs from another, and a 1-element input is one number)."""
    listed = sorted(model.batch_sizes)
    batches = ([b for b in listed if 2 <= b <= 32] or [b for b in listed if b >= 2][:1]
               or [model.profile.min_batch])
    h = int.from_bytes(hashlib.sha256(f"{model.name}/{distribution}".encode()).digest()[:8], "big")
    return batches[h % len(batches)], h % (2**31 - 1)


def synthetic_feed(inputs: tuple[InputSpec, ...], batch: int, distribution: str = "uniform",
                   seed: int = 0, dims: Dims | None = None) -> dict[str, np.ndarray]:
    """One array per input at ``batch`` rows; each named axis at ``dims[name]``, else at its opt."""
    if dims:
        _check_dims(inputs, dims)
    rng = np.random.default_rng(seed)
    return {spec.name: synthetic_array(spec, batch, distribution, rng, dims) for spec in inputs}


def tile_to_batch(feeds: dict[str, np.ndarray], batch: int, inputs: tuple[InputSpec, ...] = (),
                  dims: Dims | None = None, first: int = 0) -> dict[str, np.ndarray]:
    """Real rows repeated up to ``batch`` rows (latency on real data when a dataset exists), from row ``first`` on
    (another feed of the same data). With ``inputs`` and ``dims``, each named axis is also cut or padded to its
    length in ``dims``: padding is 0 (a mask's padding; in-range for an id input whose low is 0, else the input's
    low), cutting keeps each row's start, so a mask keeps its leading 1s."""
    n = len(next(iter(feeds.values())))
    idx = (np.arange(batch) + first) % n
    out = {k: np.ascontiguousarray(v[idx]) for k, v in feeds.items()}
    if dims:
        _check_dims(inputs, dims)
        for spec in inputs:
            out[spec.name] = _fit_axes(out[spec.name], spec, dims)
    return out


def _fit_axes(array: np.ndarray, spec: InputSpec, dims: Dims) -> np.ndarray:
    pad = 0 if spec.role == "attention_mask" or spec.low <= 0 <= spec.high else spec.low
    for j, axis in enumerate(spec.shape, start=1):
        if not isinstance(axis, str) or axis not in dims:
            continue
        want = int(dims[axis])
        have = array.shape[j]
        if have > want:
            array = np.take(array, np.arange(want), axis=j)
        elif have < want:
            widths = [(0, 0)] * array.ndim
            widths[j] = (0, want - have)
            array = np.pad(array, widths, constant_values=pad)
    return np.ascontiguousarray(array)
