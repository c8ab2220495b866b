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

import copy
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from core.cache import ArtifactCache
from core.factory import FactorySignatureError, NotAModuleError, make_module, not_a_module
from core.inputs import InputSpec, synthetic_feed
from engines.base import EngineBuildError
from engines.feeds import pick_outputs
from engines.onnx.export import DEFAULT_EXPORT_OPTIONS, forward_arg_names
from engines.pytorch import architecture_digest, model_digest
from suite.config import ConfigError, ModelConfig, SuiteConfig, resolve, where_in_user_code
from suite.preflight.datasets import check_datasets
from suite.preflight.errors import PreflightError, PreflightErrors, last_line, strip_where
from suite.preflight.output import HiddenOutput, hidden_output
from suite.preflight.weights import weights_changed

log = logging.getLogger(__name__)

#: Part of the cache key: bump it when the checks change, so that stored positive results are redone.
PREFLIGHT_VERSION = 3  # 3: a second smoke forward where the first cannot tell the batch axis


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
        raise fail(factory, strip_where(str(exc), f"{where}.factory")) from None
    except Exception as exc:
        at = where_in_user_code(exc)
        raise fail(factory, f"the factory raised {last_line(exc)}" + (f" ({at})" if at else "")) from None
    progress(f"made {model.name} in {time.perf_counter() - start:.1f} s")
    if not isinstance(module, torch.nn.Module):  # a caller's own ModelSource
        raise fail(factory, not_a_module(module, model.name).replace(f" of model {model.name!r}", ""))
    try:
        digest = made.model_digest()
    except Exception as exc:
        raise fail(factory, f"cannot hash the module's architecture and weights: {last_line(exc)}") from None
    changed = weights_changed(cache, model.name, digest, architecture_digest(module))
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
    check_datasets(model, datasets, fail, shapes)
    return CheckedModel(model.name, digest, batch, cached, time.perf_counter() - start)


def _smoke_forward(model: ModelConfig, module: torch.nn.Module, batch: int, device: str,
                   fail: Callable[..., PreflightError]) -> dict[str, list[int]]:
    """One forward at ``batch`` rows (the profile's smallest batch, but at least 2 where the profile allows); the
    outputs must be what ``outputs`` names, each with the batch axis first."""
    try:
        feed = smoke_feed(model.inputs, batch)
    except (ValueError, AssertionError) as exc:  # the declared inputs admit no such batch: theirs to fix
        raise fail("inputs", f"cannot draw a synthetic batch of {batch} from the declared inputs: {last_line(exc)}",
                   show_value=False) from None
    if device != "cpu":
        module = copy.deepcopy(module).to(device)  # the session's module stays on the CPU for exports
    try:
        args = [torch.from_numpy(feed[spec.name]).to(device) for spec in model.inputs]
        with torch.inference_mode():
            out = module(*args)
    except Exception as exc:
        raise fail("inputs", f"the smoke forward on a synthetic batch of {batch} failed: {last_line(exc)}",
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


