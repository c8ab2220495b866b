"""Start-up check of each selected model ("first contact"), before any engine is built.

Why: a config whose ``inputs`` do not fit its model (``shape = [10]`` for a ``Linear(16, 4)``), a
factory that cannot be imported, or a dataset whose feeds are named differently used to surface as
an error in every one of the model's cells, each a long traceback from inside an exporter or engine.
Here each model is made once, run once on a small synthetic batch and its datasets looked at, and a
model's first mistake is one ``PreflightError`` naming the model, the config key, the declared inputs
and the model's own complaint (the last line of its exception, and where in the user's code it was
raised). Every selected model is checked, so that a config with two broken models says so at once
(``PreflightErrors``, one line each) instead of one per rerun.

What the user sees meanwhile: a progress line before each factory is called and its time after (a
factory may train or download for minutes), and nothing of what the factory and the smoke forward
print; that is captured at the file descriptors (C extensions included) and, only when the check
fails, counted and its last lines shown under the error (``PreflightError.details``). A factory
whose weights differ from the last run's while its architecture does not (an unseeded
initialisation) gets a warning: every cache key follows the weights, so such a model rebuilds every
engine on every run.

Why cached: the smoke forward's verdict depends only on the module (its digest), what the config
declares about it and the torch version, so a positive result is stored in the artifact cache under
those and a later run with nothing changed skips the forward. The dataset checks are not cached: once
a dataset is loaded (which the run needs anyway) they are a few shape comparisons, cheaper than the
digest that would key them.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import copy
import ctypes
import io
import json
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from core.cache import ArtifactCache
from core.factory import FactorySignatureError, NotAModuleError, make_module, not_a_module
from core.inputs import InputSpec, synthetic_feed
from engines.base import EngineBuildError
from engines.feeds import pick_outputs, value_kind
from engines.onnx.export import DEFAULT_EXPORT_OPTIONS, forward_arg_names
from engines.pytorch import architecture_digest, model_digest
from suite.config import ConfigError, ModelConfig, SuiteConfig, resolve, where_in_user_code

log = logging.getLogger(__name__)

#: Part of the cache key: bump it when the checks change, so that stored positive results are redone.
PREFLIGHT_VERSION = 3  # 3: a second smoke forward where the first cannot tell the batch axis
_DATASET_KEYS = ("accuracy_dataset", "parity_dataset", "calibration_dataset")


#: The suite's progress lines start with this (suite/plugin.py): they reach the terminal while a model's output
#: is hidden.
PROGRESS_PREFIX = "[engine cache]"
#: The last weights digest of each model, by name: ROOT/preflight/WEIGHTS_FILE of the artifact cache.
WEIGHTS_FILE = "last-weights.json"


class HiddenOutput:
    """What a model printed while it was made and run: how many lines, and the last few worth showing."""

    SHOWN = 5

    def __init__(self) -> None:
        self.lines = 0
        self.last: collections.deque[str] = collections.deque(maxlen=self.SHOWN)

    def add(self, line: str) -> None:
        self.lines += 1
        shown = line.rsplit("\r", 1)[-1].rstrip()  # a progress bar's last state
        if shown.strip():
            self.last.append(shown if len(shown) <= 200 else shown[:199] + "…")

    def describe(self, model: str) -> list[str]:
        if not self.lines:
            return []
        head = f"{model}'s factory and smoke forward printed {self.lines} line{'s' if self.lines != 1 else ''} (hidden)"
        return [head + (f"; the last {len(self.last)}:" if self.last else ""), *(f"| {line}" for line in self.last)]


class PreflightError(ConfigError):
    """A model failed its start-up check; ``model`` and ``key`` say which entry of the config to fix. The message is
    one line; what the model printed meanwhile is in ``output`` (``details()``: the lines to show under it)."""

    def __init__(self, message: str, model: str, key: str, output: HiddenOutput | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.key = key
        self.output = output

    def details(self) -> list[str]:
        return self.output.describe(self.model) if self.output is not None else []


class PreflightErrors(ConfigError):
    """Several models failed their start-up check: ``errors``, one PreflightError (one line) each."""

    def __init__(self, errors: list[PreflightError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = list(errors)


def startup_message(exc: ConfigError, config_name: str) -> str:
    """The usage error's text: one line per failed model (under a count when there are several), each followed by
    what the model printed, if anything (indented)."""
    if isinstance(exc, PreflightErrors):
        lines = [f"{config_name}: {len(exc.errors)} models failed their start-up check, one line each:"]
        for err in exc.errors:
            lines += [f"  {err}", *(f"    {line}" for line in err.details())]
        return "\n".join(lines)
    if isinstance(exc, PreflightError):
        return "\n".join([f"{config_name}: {exc}", *(f"  {line}" for line in exc.details())])
    return f"{config_name}: {exc}"


class ModelSource(Protocol):
    """Where preflight gets a model: the session's ``ModelBuild`` fits, so the module is made once."""

    def torch_module(self) -> Any: ...

    def model_digest(self) -> str: ...


@dataclass(frozen=True)
class CheckedModel:
    """A model that passed: its digest, the batch it was run at, and whether the cache vouched for it."""

    name: str
    digest: str
    batch: int
    cached: bool
    seconds: float


# =========================================================================== factories


class _FactoryModel:
    """The default ModelSource when no session is given: resolve, call and digest, each once."""

    def __init__(self, model: ModelConfig, cache: ArtifactCache) -> None:
        self.model = model
        self.cache = cache
        self._module: torch.nn.Module | None = None
        self._digest: str | None = None

    def torch_module(self) -> Any:
        if self._module is None:
            factory = resolve(self.model.factory, f"[models.{self.model.name}].factory")
            self._module = make_module(factory, self.cache, self.model.name)
        return self._module

    def model_digest(self) -> str:
        if self._digest is None:
            self._digest = model_digest(self.torch_module())
        return self._digest


# =========================================================================== the check


def check_models(
    config: SuiteConfig,
    cache: ArtifactCache,
    device: str = "cpu",
    *,
    build_for: Callable[[str], ModelSource] | None = None,
    dataset_for: Callable[[str], Any] | None = None,
    progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, CheckedModel]:
    """Check every model of ``config``: a PreflightError for the one model that fails, PreflightErrors when several
    do (each model's first mistake, one line each).

    ``build_for(name)`` and ``dataset_for(ref)`` let the caller share what it builds anyway (pass the
    session's ``build`` and ``dataset``): then each module and dataset is made once per run. Without
    them preflight makes its own. ``progress(text)`` is told before each factory is called and when it
    returned; ``warn(text)`` (default: the log) hears of weights that changed since the last run.
    """
    built: dict[str, Any] = {}

    def default_dataset(ref: str) -> Any:
        if ref not in built:
            built[ref] = resolve(ref, f"dataset {ref}")(cache)
        return built[ref]

    datasets = dataset_for or default_dataset

    def source(model: ModelConfig) -> ModelSource:
        return build_for(model.name) if build_for else _FactoryModel(model, cache)

    say = progress or (lambda text: None)
    tell = warn or log.warning
    checked: dict[str, CheckedModel] = {}
    errors: list[PreflightError] = []
    for name, model in config.models.items():
        try:
            checked[name] = _check_model(model, cache, device, source, datasets, say, tell)
        except PreflightError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise PreflightErrors(errors)
    return checked


def _check_model(model: ModelConfig, cache: ArtifactCache, device: str,
                 source: Callable[[ModelConfig], ModelSource], datasets: Callable[[str], Any],
                 progress: Callable[[str], None], warn: Callable[[str], None]) -> CheckedModel:
    start = time.perf_counter()
    where = f"[models.{model.name}]"
    declared = _describe_inputs(model.inputs)
    output = HiddenOutput()  # what the factory and the smoke forward print: shown only under an error

    def fail(key: str, problem: str, show_value: bool = True) -> PreflightError:
        """One line: the key (with its value, unless that is the inputs we list anyway), what is wrong, the inputs."""
        value = getattr(model, key)
        value = list(value) if isinstance(value, tuple) else value
        at = f"{where}.{key} = {value!r}" if show_value else f"{where}.{key}"
        return PreflightError(f"{at}: {problem}; declared inputs: {declared}", model.name, key, output)

    factory = "factory"
    progress(f"making {model.name} (factory {model.factory}) ...")
    try:
        with hidden_output(output):
            made = source(model)
            module = made.torch_module()
    except (FactorySignatureError, NotAModuleError) as exc:
        raise fail(factory, str(exc)) from None
    except ConfigError as exc:  # cannot import the module, no such callable
        raise fail(factory, _strip_where(str(exc), f"{where}.factory")) from None
    except Exception as exc:
        at = where_in_user_code(exc)
        raise fail(factory, f"the factory raised {_last_line(exc)}" + (f" ({at})" if at else "")) from None
    progress(f"made {model.name} in {time.perf_counter() - start:.1f} s")
    if not isinstance(module, torch.nn.Module):  # a caller's own ModelSource
        raise fail(factory, not_a_module(module, model.name).replace(f" of model {model.name!r}", ""))
    try:
        digest = made.model_digest()
    except Exception as exc:
        raise fail(factory, f"cannot hash the module's architecture and weights: {_last_line(exc)}") from None
    changed = _weights_changed(cache, model.name, digest, architecture_digest(module))
    if changed:
        warn(f"{model.name}: the factory returned different weights than last run (digest {changed[0][:12]} -> "
             f"{changed[1][:12]}): seed it, or every run rebuilds every engine")

    # The profile's smallest batch, but at least 2 rows where the profile allows: at batch 1 a model that reduces
    # the batch (out.mean(0)) has the right shape and would pass.
    batch = min(model.profile.max_batch, max(2, model.profile.min_batch))
    # Where an output has the batch's size on another axis too ((5, 5) from out.t() with 5 classes at batch 5), its
    # first dimension may be the batch by accident: a second forward at another batch of the profile (the smallest
    # other) tells them apart. Only then: for every other model, one forward stays enough.
    second = next((b for b in sorted(model.batch_sizes) if b != batch), None)
    run_on = _usable_device(device)
    parts = {"version": PREFLIGHT_VERSION, "model": model.name, "model_digest": digest,
             "inputs": [i.as_key() for i in model.inputs], "outputs": list(model.outputs), "batch": batch,
             "second_batch": second, "device": run_on, "torch": torch.__version__}

    def build(directory: Path) -> None:
        with hidden_output(output):
            shapes = _smoke_forward(model, module, batch, run_on, fail)
            if second is not None and any(batch in shape[1:] for shape in shapes.values()):
                _smoke_forward(model, module, second, run_on, fail)
        (directory / "passed.json").write_text(json.dumps({"outputs": shapes}, sort_keys=True))

    hits = cache.stats.hits
    entry = cache.get_or_build("preflight", parts, build, label=f"check {model.name} (smoke forward at batch {batch})")
    cached = cache.stats.hits > hits
    shapes = json.loads((entry / "passed.json").read_text())["outputs"]
    _check_forward_parameters(model, module, fail)
    _check_datasets(model, datasets, fail, shapes)
    return CheckedModel(model.name, digest, batch, cached, time.perf_counter() - start)


def _smoke_forward(model: ModelConfig, module: torch.nn.Module, batch: int, device: str,
                   fail: Callable[..., PreflightError]) -> dict[str, list[int]]:
    """One forward at ``batch`` rows (the profile's smallest batch, but at least 2 where the profile allows); the
    outputs must be what ``outputs`` names, each with the batch axis first."""
    try:
        feed = smoke_feed(model.inputs, batch)
    except (ValueError, AssertionError) as exc:  # the declared inputs admit no such batch: theirs to fix
        raise fail("inputs", f"cannot draw a synthetic batch of {batch} from the declared inputs: {_last_line(exc)}",
                   show_value=False) from None
    if device != "cpu":
        module = copy.deepcopy(module).to(device)  # the session's module stays on the CPU for exports
    try:
        args = [torch.from_numpy(feed[spec.name]).to(device) for spec in model.inputs]
        with torch.inference_mode():
            out = module(*args)
    except Exception as exc:
        raise fail("inputs", f"the smoke forward on a synthetic batch of {batch} failed: {_last_line(exc)}",
                   show_value=False) from None
    named = _named_outputs(out, model, fail)
    shapes = {}
    for name, tensor in named.items():
        shape = tuple(tensor.shape)
        if not shape or shape[0] != batch:
            raise fail("outputs", f"output {name!r} has shape {list(shape)} for a batch of {batch}; every output "
                                  "needs the batch axis first", show_value=False)
        shapes[name] = list(shape)
    return shapes


def _check_forward_parameters(model: ModelConfig, module: torch.nn.Module,
                              fail: Callable[..., PreflightError]) -> None:
    """forward() takes the declared inputs the way the builds will pass them (engines.onnx.export.forward_arg_names,
    the one rule), where a selected engine's build passes them so: inductor's torch.export, and the dynamo ONNX
    export that onnxruntime and tensorrt consume. A BertModel with input_ids and attention_mask declared passed the
    smoke forward (its other parameters have defaults), then failed every such cell's build."""
    exporter = model.export.get("exporter", DEFAULT_EXPORT_OPTIONS["exporter"])
    if not any(e == "inductor" or (e in ("onnxruntime", "tensorrt") and exporter == "dynamo") for e in model.engines):
        return
    try:
        forward_arg_names(module, model.inputs, "the model")
    except EngineBuildError as exc:
        raise fail("inputs", str(exc).removeprefix("the model: "), show_value=False) from None


def _named_outputs(out: Any, model: ModelConfig, fail: Callable[..., PreflightError]) -> dict[str, Any]:
    """The module's return value by configured name, by the one rule every engine binds with
    (engines.feeds.pick_outputs: by key for a dict or named tuple, by position otherwise)."""
    names = list(model.outputs)
    if not isinstance(out, (torch.Tensor, Mapping, tuple, list)):
        raise fail("outputs", f"the model returns {type(out).__name__}; expected a tensor, a tuple of tensors or a "
                              "dict")
    try:
        values = pick_outputs(out, names, "the model")
    except ValueError as exc:
        raise fail("outputs", str(exc).removeprefix("the model: ")) from None
    for name, value in zip(names, values, strict=True):
        if not isinstance(value, torch.Tensor):
            raise fail("outputs", f"output {name!r} is {type(value).__name__}, not a tensor")
    return dict(zip(names, values, strict=True))


def _check_datasets(model: ModelConfig, datasets: Callable[[str], Any],
                    fail: Callable[..., PreflightError], output_shapes: Mapping[str, list[int]]) -> None:
    """Each dataset the model names: callable, with exactly the declared inputs (names, shapes, kind of dtype,
    finite values), labels row for row and within the first output's classes, and at least parity_samples rows
    for the parity data. A named axis (``"seq"``) may have any length within its range, the same in every feed
    that has it."""
    expected = {spec.name: tuple(spec.shape) for spec in model.inputs}
    specs = {spec.name: spec for spec in model.inputs}
    for attr in _DATASET_KEYS:
        ref = getattr(model, attr)
        if ref is None:
            continue
        key = attr
        try:
            data = datasets(ref)
        except ConfigError as exc:
            raise fail(key, _strip_where(str(exc), f"dataset {ref}")) from None
        except Exception as exc:
            raise fail(key, f"the dataset raised {_last_line(exc)}") from None
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


# =========================================================================== what the model prints


@contextlib.contextmanager
def hidden_output(into: HiddenOutput, passthrough: tuple[str, ...] = (PROGRESS_PREFIX,)) -> Iterator[None]:
    """Whatever is written to stdout and stderr meanwhile, by Python or below it (a C extension writing to the file
    descriptors), goes into ``into`` instead of the terminal. A line that starts with ``passthrough`` (the suite's
    own progress, e.g. a cache build the factory starts) still reaches the terminal, as it is written.

    How: descriptors 1 and 2 point at a pipe (and sys.stdout/sys.stderr at them) while a thread reads it; then both
    are put back. Where there is no descriptor to redirect, the output is left alone."""
    _flush_streams()
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:
        yield
        return
    read_end, write_end = os.pipe()
    reader = threading.Thread(target=_drain, args=(read_end, into, saved[0], passthrough), daemon=True,
                              name="preflight-output")
    reader.start()
    streams = sys.stdout, sys.stderr
    try:
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        sys.stdout, sys.stderr = _text_stream(1), _text_stream(2)
        yield
    finally:
        _flush_streams()
        sys.stdout, sys.stderr = streams
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(write_end)
        # EOF once every copy of the pipe's write end is closed; a child process the model started may hold one.
        reader.join(timeout=5)
        os.close(saved[1])
        if not reader.is_alive():  # else it may still pass a line through: leave it its descriptor
            os.close(saved[0])


def _text_stream(fd: int) -> Any:
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                            write_through=True)


def _drain(fd: int, into: HiddenOutput, terminal: int, passthrough: tuple[str, ...]) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending = ""

    def route(line: str) -> None:
        if passthrough and _ANSI.sub("", line).startswith(passthrough):
            with contextlib.suppress(OSError):
                os.write(terminal, (line + "\n").encode())
        else:
            into.add(line)

    try:
        while chunk := os.read(fd, 1 << 16):
            *lines, pending = (pending + decoder.decode(chunk)).split("\n")
            for line in lines:
                route(line)
        pending += decoder.decode(b"", final=True)
        if pending:
            route(pending)
    finally:
        os.close(fd)


def _flush_streams() -> None:
    """What Python and C's stdio have buffered goes where it was meant to before the descriptors change."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        _libc().fflush(None)


_LIBC: list[Any] = []


def _libc() -> Any:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None))
    return _LIBC[0]


# =========================================================================== weights that change between runs


def _weights_changed(cache: ArtifactCache, model: str, digest: str, architecture: str) -> tuple[str, str] | None:
    """Remember this run's digest of ``model`` in the cache; (last run's digest, this one) when only the weights
    differ from last run's. Best effort: a cache this cannot write to only loses the warning."""
    from filelock import FileLock, Timeout

    path = cache.root / "preflight" / WEIGHTS_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock", timeout=10):
            try:
                seen = json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                seen = {}
            seen = seen if isinstance(seen, dict) else {}
            before = seen.get(model)
            seen[model] = {"digest": digest, "architecture": architecture}
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(seen, indent=1, sort_keys=True))
            os.replace(tmp, path)
    except (OSError, Timeout) as exc:
        log.debug("cannot remember the weights digest of %s in %s: %s", model, path, exc)
        return None
    if (isinstance(before, dict) and before.get("architecture") == architecture
            and isinstance(before.get("digest"), str) and before["digest"] != digest):
        return before["digest"], digest
    return None


# =========================================================================== helpers


def smoke_feed(inputs: tuple[InputSpec, ...], batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A synthetic batch within each input's declared range and dtype, never constant (a constant input
    can pass through a model that is wired wrongly): the generator the parity tests use."""
    return synthetic_feed(inputs, batch, "uniform", seed)


def _usable_device(device: str) -> str:
    """Run where the session will run, when that device exists; otherwise on the CPU (the run's own
    device check reports a missing GPU; this check is about the model and its config)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return device
    return "cpu"


def _describe_inputs(inputs: tuple[InputSpec, ...]) -> str:
    return ", ".join(f"{i.name} {i.dtype} {list(i.shape)} in [{i.low:g}, {i.high:g}]" for i in inputs)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
def _last_line(exc: BaseException) -> str:
    """The exception's type and the last non-empty line of its message: what the model says went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def _strip_where(message: str, where: str) -> str:
    """resolve()'s message starts with the location we already name."""
    return message.removeprefix(f"{where}: ")
