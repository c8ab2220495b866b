"""Making a model's module from its factory: the one way a configured model is made, by preflight
(suite/preflight/) and by engines.artifacts.ModelBuild alike. A factory is ``make()`` or ``make(cache)``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from core.cache import ArtifactCache


class FactorySignatureError(TypeError):
    """A factory whose parameters are neither none nor one (the cache)."""


class NotAModuleError(TypeError):
    """A factory returned something other than a torch.nn.Module."""


def call_factory(factory: Callable[..., Any], cache: ArtifactCache) -> Any:
    """Call a model factory as the config allows: ``make()`` or ``make(cache)``.

    Why not always ``make(cache)``: a factory that needs no cached weights is most naturally written
    without the argument, and calling it with one used to fail with a TypeError from engine code.
    """
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # no signature to read (some builtins): the documented form
        return factory(cache)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional if p.default is p.empty]
    required += [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if len(required) > 1 or any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in params):
        name = getattr(factory, "__qualname__", repr(factory))
        raise FactorySignatureError(f"{name}() requires {', '.join(required)}; a factory takes no argument or one "
                                    "(the suite's ArtifactCache)")
    if positional or any(p.kind == p.VAR_POSITIONAL for p in params):
        return factory(cache)
    return factory()


def make_module(factory: Callable[..., Any], cache: ArtifactCache, model: str) -> torch.nn.Module:
    """The one way a configured model is made (preflight and engines.artifacts.ModelBuild alike):
    call the factory, insist on a torch.nn.Module, and put it in eval mode."""
    module = call_factory(factory, cache)
    if not isinstance(module, torch.nn.Module):
        raise NotAModuleError(not_a_module(module, model))
    return module.eval()


def not_a_module(made: Any, model: str) -> str:
    """What NotAModuleError says of what a factory returned instead of a module."""
    if isinstance(made, type) and issubclass(made, torch.nn.Module):
        return (f"the factory of model {model!r} returned the class {made.__name__}, not an instance of it; did you "
                f"return the class? call it: return {made.__name__}()")
    return f"the factory of model {model!r} returned {type(made).__name__}, not a torch.nn.Module"
