"""Feed and output checks shared by every runner and the session, so a wrong feed, a wrongly typed
input or a wrongly shaped output fails the same clear way on every engine; and the one rule that binds
a model's return value to the configured output names, shared by eager torch, the ONNX export and
inductor so that all three agree on which tensor is which."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

#: An engine's input: one array per input name (the batch axis first), so multi-input models just work.
Feed = Mapping[str, np.ndarray]


def check_feed(feed: Feed, input_names: Iterable[str]) -> None:
    expected = list(input_names)
    missing = [n for n in expected if n not in feed]
    extra = [n for n in feed if n not in expected]
    if missing or extra:
        raise ValueError(f"feed has inputs {sorted(feed)}; engine expects {expected}"
                         + (f" (missing {missing})" if missing else "") + (f" (unexpected {extra})" if extra else ""))
    batches = {n: np.shape(feed[n])[0] if np.ndim(feed[n]) else None for n in expected}
    if len(set(batches.values())) > 1:
        raise ValueError(f"feed inputs disagree on batch size: {batches}")


# ---- outputs: one row per input row ----------------------------------------------------------------


class OutputShapeError(ValueError):
    """An output without one row per input row: a model (or engine) that reduces, repeats or drops
    the batch would otherwise pass parity whenever the reference does the same."""


def check_outputs(outputs: Mapping[str, np.ndarray], batch: int, where: str) -> None:
    """Raise OutputShapeError unless every output's first dimension is the feed's ``batch``.

    Call it on each engine call's outputs (each chunk), not on concatenated ones: a per-chunk mean
    concatenated over chunks has as many rows as there are chunks, not as the data.
    """
    if not outputs:
        raise OutputShapeError(f"{where}: returned no outputs for a feed of batch {batch}")
    for name, array in outputs.items():
        shape = tuple(np.shape(array))
        if not shape:
            raise OutputShapeError(f"{where}: output {name!r} is 0-d (shape ()); expected shape ({batch}, ...): "
                                   f"one row per input row, the feed's batch is {batch}")
        if shape[0] != batch:
            expected = (batch, *shape[1:])
            raise OutputShapeError(f"{where}: output {name!r} has shape {shape}, expected {expected}: its first "
                                   f"dimension must be the feed's batch {batch} (one row per input row)")


class OutputDtypeError(ValueError):
    """An engine output of another kind of value than the reference's (a float for an integer), or a float
    narrower than the reference's: an engine returning float16 for an fp32 cell had its dtype never compared."""


def check_output_dtypes(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.dtype[Any]],
                        where: str) -> None:
    """Raise OutputDtypeError unless each output has the reference output's kind of value (bool, integer,
    floating) and, for a float, at least its width.

    The rule holds at every precision: every engine returns its outputs at the reference's width whatever the
    precision it computes in (torch and inductor cast float outputs to float32, the fp16 and bf16 ONNX
    conversions keep float32 inputs and outputs, the int8 QDQ model and the TensorRT engines built from these
    graphs too), so a narrower float is an engine that lost precision on its way out. Integer widths may differ
    (TensorRT returns some int64 tensors as int32); the values are compared anyway.
    """
    for name, array in outputs.items():
        if name not in reference:
            continue
        got, want = np.asarray(array).dtype, np.dtype(reference[name])
        if value_kind(got) != value_kind(want):
            raise OutputDtypeError(f"{where}: output {name!r} is {got} ({value_kind(got)}), the reference's is {want} "
                                   f"({value_kind(want)}): the engine returns another kind of value")
        if value_kind(got) == "floating" and got.itemsize < want.itemsize:
            raise OutputDtypeError(f"{where}: output {name!r} is {got}, the reference's is {want}: every engine "
                                   f"returns its outputs at least at the reference's float width, whatever precision "
                                   f"it computes in; a narrower output lost precision on its way out")


# ---- inputs: the engine's dtype, never a silent change of kind or value --------------------------------


def value_kind(dtype: np.dtype[Any]) -> str:
    """'bool', 'integer' or 'floating' (else numpy's kind letter): the kinds of value ``as_input_dtype`` never
    casts between and ``check_output_dtypes`` holds each output to."""
    if dtype == np.bool_:
        return "bool"
    if np.issubdtype(dtype, np.integer):
        return "integer"
    if np.issubdtype(dtype, np.floating):
        return "floating"
    return dtype.kind


def as_input_dtype(array: Any, dtype: np.dtype[Any] | type | str, name: str, where: str) -> np.ndarray:
    """``array`` as a contiguous array of the engine input's ``dtype``.

    Only changes within a kind of value happen: float to float (float64 rows rounded into a float32
    input, as any engine would), or integer to integer when every value fits (int64 token ids into an
    int32 TensorRT input). A float fed to an integer or bool input, an integer to a float one, or an id
    the input's type cannot hold is a TypeError naming the input: casting would truncate or wrap ids, or
    hide a feed built for another model.
    """
    want = np.dtype(dtype)
    arr = np.asarray(array)
    if arr.dtype == want:
        return np.ascontiguousarray(arr)
    got_kind, want_kind = value_kind(arr.dtype), value_kind(want)
    if got_kind != want_kind:
        raise TypeError(f"{where}: input {name!r} is {arr.dtype} ({got_kind}); the engine's input is {want} "
                        f"({want_kind}): refusing a cast that changes the kind of value")
    if want_kind == "integer" and arr.size:
        info = np.iinfo(want)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise TypeError(f"{where}: input {name!r} ({arr.dtype}) holds values in [{lo}, {hi}], outside the "
                            f"engine input's {want} range [{info.min}, {info.max}]")
    return np.ascontiguousarray(arr, dtype=want)


# ---- binding a model's return value to the configured output names ------------------------------------


def _is_named_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and isinstance(getattr(value, "_fields", None), tuple)


def returned_output_names(out: Any) -> list[str] | None:
    """The names a model's return value carries: dict keys or named-tuple fields, in their order; None for
    a tensor, tuple or list, whose outputs are bound to the configured names by position. A dict key that is not
    a string is named by its text (``{0: logits}`` returns an output named "0")."""
    if isinstance(out, Mapping):
        return [str(k) for k in out]
    if _is_named_tuple(out):
        return list(out._fields)
    return None


def _keys_by_name(out: Mapping[Any, Any], where: str) -> dict[str, Any]:
    """Each configured name back to its dict key: the name is the key's text (``"0"`` for the key ``0``). Two keys
    with one text (``0`` and ``"0"``) cannot be told apart by a name: a ValueError naming both."""
    keys: dict[str, Any] = {}
    for key in out:
        if str(key) in keys:
            raise ValueError(f"{where}: the model's dict has keys {keys[str(key)]!r} and {key!r}, which both read as "
                             f"the output name {str(key)!r}; give them names that differ")
        keys[str(key)] = key
    return keys


def pick_outputs(out: Any, names: Sequence[str], where: str) -> list[Any]:
    """The model's outputs in the configured order: by key for a dict or named tuple, by position for a
    tensor, tuple or list. The one binding rule of eager torch, the ONNX export and inductor.

    A configured name the model does not return is a ValueError listing the names it does return; a
    positional return value must have exactly as many outputs as there are configured names.
    """
    returned = returned_output_names(out)
    if returned is not None:
        missing = [n for n in names if n not in returned]
        if missing:
            raise ValueError(f"{where}: outputs {missing} are configured but the model does not return them; it "
                             f"returns {type(out).__name__} with names {returned} (configured: {list(names)})")
        if isinstance(out, Mapping):
            keys = _keys_by_name(out, where)
            return [out[keys[n]] for n in names]
        return [getattr(out, n) for n in names]
    values = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(values) != len(names):
        raise ValueError(f"{where}: the model returns {len(values)} unnamed output(s) "
                         f"({type(out).__name__}), the config names {len(names)}: {list(names)}; a tuple or "
                         "list is bound by position, so the counts must match (return a dict to bind by name)")
    return values
