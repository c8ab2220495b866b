"""Synthetic feeds within each input's declared range, in several value distributions.

Why several: engines break at the edges (saturating int8 scales, fp16 overflow, sparse activations),
which uniform noise alone rarely reaches. Never all-zero: a zero input can hide a broken engine and
makes latency meaningless on hardware that skips work.
"""

from __future__ import annotations

import numpy as np

from engines.base import InputSpec

DISTRIBUTIONS: tuple[str, ...] = ("uniform", "normal", "extremes", "sparse")


def synthetic_array(spec: InputSpec, batch: int, distribution: str, rng: np.random.Generator) -> np.ndarray:
    shape = spec.batch_shape(batch)
    lo, hi = spec.low, spec.high
    if np.issubdtype(np.dtype(spec.dtype), np.integer):
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(spec.dtype)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    if distribution == "uniform":
        arr = rng.uniform(lo, hi, size=shape)
    elif distribution == "normal":
        arr = np.clip(rng.normal(mid, half / 3, size=shape), lo, hi)
    elif distribution == "extremes":
        arr = np.where(rng.random(shape) < 0.5, lo, hi) + rng.uniform(-0.01, 0.01, size=shape) * half
        arr = np.clip(arr, lo, hi)
    elif distribution == "sparse":
        arr = np.where(rng.random(shape) < 0.1, rng.uniform(lo, hi, size=shape), lo if lo >= 0 else mid)
    else:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {DISTRIBUTIONS}")
    arr = arr.astype(spec.dtype)
    if not np.any(arr != arr.flat[0]):
        raise AssertionError(f"synthetic input {spec.name} came out constant; refusing to use it")
    return arr


def synthetic_feed(inputs: tuple[InputSpec, ...], batch: int, distribution: str = "uniform",
                   seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {spec.name: synthetic_array(spec, batch, distribution, rng) for spec in inputs}


def tile_to_batch(feeds: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """Real rows repeated up to ``batch`` rows (latency on real data when a dataset exists)."""
    n = len(next(iter(feeds.values())))
    idx = np.arange(batch) % n
    return {k: np.ascontiguousarray(v[idx]) for k, v in feeds.items()}
