"""Synthetic feeds within each input's declared range, in several value distributions.

Why several: engines break at the edges (saturating int8 scales, fp16 overflow, sparse activations),
which uniform noise alone rarely reaches. Never all-zero: a zero input can hide a broken engine and
makes latency meaningless on hardware that skips work. Integer and bool inputs (token ids, masks) get
integers within [low, high] in their own dtype.
"""

from __future__ import annotations

import math

import numpy as np

from engines.base import InputSpec

DISTRIBUTIONS: tuple[str, ...] = ("uniform", "normal", "extremes", "sparse")


def synthetic_array(spec: InputSpec, batch: int, distribution: str, rng: np.random.Generator) -> np.ndarray:
    shape = spec.batch_shape(batch)
    lo, hi = spec.low, spec.high
    dtype = np.dtype(spec.dtype)
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
    arr = arr.astype(spec.dtype)
    if not np.any(arr != arr.flat[0]):
        raise AssertionError(f"synthetic input {spec.name} came out constant; refusing to use it")
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
    first = arr.flat[0]
    if np.all(arr == first) and (arr.size > 1 or first == 0):
        arr.flat[-1] = hi if first != hi else lo  # one other value: not constant (and not all zero)
    return arr.astype(dtype)


def synthetic_feed(inputs: tuple[InputSpec, ...], batch: int, distribution: str = "uniform",
                   seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {spec.name: synthetic_array(spec, batch, distribution, rng) for spec in inputs}


def tile_to_batch(feeds: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """Real rows repeated up to ``batch`` rows (latency on real data when a dataset exists)."""
    n = len(next(iter(feeds.values())))
    idx = np.arange(batch) % n
    return {k: np.ascontiguousarray(v[idx]) for k, v in feeds.items()}
