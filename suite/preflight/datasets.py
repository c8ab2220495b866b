"""Preflight's look at each data set a model names: the feeds the config declares, labels that are class
indices, enough rows. Not cached: once a data set is loaded (the run needs it anyway) these are a few shape
comparisons, cheaper than the digest that would key them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engines.feeds import value_kind
from suite.config import ConfigError, ModelConfig
from suite.preflight.errors import PreflightError, last_line, strip_where

DATASET_KEYS = ("accuracy_dataset", "parity_dataset", "calibration_dataset")


def check_datasets(model: ModelConfig, datasets: Callable[[str], Any],
                    fail: Callable[..., PreflightError], output_shapes: Mapping[str, list[int]]) -> None:
    """Each dataset the model names: callable, with exactly the declared inputs (names, shapes, kind of dtype,
    finite values), labels row for row and within the first output's classes, and at least parity_samples rows
    for the parity data. A named axis (``"seq"``) may have any length within its range, the same in every feed
    that has it."""
    expected = {spec.name: tuple(spec.shape) for spec in model.inputs}
    specs = {spec.name: spec for spec in model.inputs}
    for attr in DATASET_KEYS:
        ref = getattr(model, attr)
        if ref is None:
            continue
        key = attr
        try:
            data = datasets(ref)
        except ConfigError as exc:
            raise fail(key, strip_where(str(exc), f"dataset {ref}")) from None
        except Exception as exc:
            raise fail(key, f"the dataset raised {last_line(exc)}") from None
        feeds = getattr(data, "feeds", None)
        if not isinstance(feeds, Mapping):
            raise fail(key, f"returned {type(data).__name__}, not a dataset with named feeds "
                            "(fixtures.data.Dataset)")
        if sorted(feeds) != sorted(expected):
            raise fail(key, f"its feeds are named {sorted(feeds)}; inputs declare {sorted(expected)}")
        rows: dict[str, int] = {}
        lengths: dict[str, tuple[int, str]] = {}  # named axis -> (its length in this dataset, the feed that set it)
        for name, want in expected.items():
            shape = tuple(np.shape(feeds[name]))
            if not shape:
                raise fail(key, f"feed {name!r} is a scalar; it needs a batch axis of rows")
            if len(shape[1:]) != len(want) or any(isinstance(w, int) and g != w
                                                  for g, w in zip(shape[1:], want, strict=True)):
                raise fail(key, f"feed {name!r} has rows of shape {list(shape[1:])}; inputs declare {list(want)}")
            for got, axis in zip(shape[1:], want, strict=True):
                if not isinstance(axis, str):
                    continue
                r = specs[name].axis(axis)
                if not r.min <= got <= r.max:
                    raise fail(key, f"feed {name!r} has {axis} = {got}, outside axis {axis!r}'s range "
                                    f"{r.min}..{r.max}")
                first = lengths.setdefault(axis, (got, name))
                if first[0] != got:
                    raise fail(key, f"feeds {first[1]!r} and {name!r} disagree on axis {axis!r}: {first[0]} and {got}")
            rows[name] = shape[0]
            values = np.asarray(feeds[name])
            want_float = np.issubdtype(np.dtype(specs[name].dtype), np.floating)
            want_kind = value_kind(np.dtype(specs[name].dtype))
            if value_kind(values.dtype) != want_kind:  # every engine refuses a cast across kinds (float, int, bool)
                raise fail(key, f"feed {name!r} is {values.dtype}; input {name!r} is declared {specs[name].dtype} "
                                f"(a {'float' if want_kind == 'floating' else want_kind} input)")
            if want_float and not np.isfinite(values).all():
                bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
                raise fail(key, f"feed {name!r} holds NaN/Inf in {len(bad)} of its {len(values)} rows (first: row "
                                f"{bad[0]}): a reference fed that fails every check it takes part in")
            if not want_float and values.size:
                # An id outside the declared range (77 for a vocabulary of 50, or -1) fails deep inside an
                # embedding, naming neither the input nor the row: here it is named, with its row and value.
                lo, hi = math.ceil(specs[name].low), math.floor(specs[name].high)
                outside = ((values < lo) | (values > hi)).reshape(len(values), -1)
                if outside.any():
                    bad = np.flatnonzero(outside.any(axis=1))
                    first_value = values.reshape(len(values), -1)[bad[0]][outside[bad[0]]][0]
                    count = int(outside.sum())
                    raise fail(key, f"feed {name!r} holds {count} value{'s' if count != 1 else ''} outside the range "
                                    f"[{lo}, {hi}] declared for input {name!r}, in {len(bad)} of its {len(values)} "
                                    f"rows (first: row {bad[0]}, value {first_value})")
        if len(set(rows.values())) != 1:
            raise fail(key, f"its feeds have different numbers of rows: {rows}")
        n_rows = next(iter(rows.values()))
        if n_rows == 0:
            raise fail(key, "the data set has 0 rows; it needs at least one (every check it feeds would compare "
                            "nothing)")
        labels = getattr(data, "labels", None)
        if attr == "accuracy_dataset" and labels is None:
            raise fail(key, "the dataset has no labels; top-1/top-5 accuracy needs them")
        if labels is not None:
            _check_labels(key, np.asarray(labels), n_rows, model, output_shapes, fail)
        if attr == "parity_dataset" and model.parity_samples_set and model.parity_samples > n_rows:
            raise fail("parity_samples", f"the parity_dataset {ref} has {n_rows} rows, fewer than asked for; lower "
                                         "parity_samples or give the data set more rows")


def _check_labels(key: str, classes: np.ndarray, n_rows: int, model: ModelConfig,
                  output_shapes: Mapping[str, list[int]], fail: Callable[..., PreflightError]) -> None:
    """Labels are class indices: a 1-D integer array, one per row, none negative, and each below the number of
    classes where the first output says it ((rows, classes) logits). Strings, floats (NaN among them) and
    one-hot rows once passed start-up and then failed every accuracy test, or stopped the run."""
    if classes.ndim != 1 or classes.dtype.kind not in "iu":
        nan = (f", {int(np.isnan(classes).sum())} of them NaN" if classes.dtype.kind == "f" and np.isnan(classes).any()
               else "")
        hint = " (one-hot rows? give their argmax)" if classes.ndim == 2 else ""
        raise fail(key, f"labels are {classes.dtype} of shape {list(classes.shape)}{nan}; labels are class indices, "
                        f"a 1-D array of integers with one per row{hint}")
    if len(classes) != n_rows:
        raise fail(key, f"{len(classes)} labels for {n_rows} rows")
    first = output_shapes.get(model.outputs[0]) or []
    known = len(first) == 2
    outside = np.flatnonzero((classes < 0) | (classes >= first[1])) if known else np.flatnonzero(classes < 0)
    if len(outside):
        where = f"the {first[1]} classes of output {model.outputs[0]!r}" if known else "the class indices (>= 0)"
        raise fail(key, f"{len(outside)} labels lie outside {where} (first at row {outside[0]}: "
                        f"{classes[outside[0]]})")
