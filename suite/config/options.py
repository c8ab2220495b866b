"""Command-line values that narrow a config (``--latency-batch-sizes``, ``--latency-rounds``).

Why a module of its own: they are checked against the parsed config (a batch size no selected model runs is an
error, not an empty selection) with the same ``ConfigError``, but they come from the command line, not the TOML.
``--models``/``--engines``/``--precisions`` are checked by ``SuiteConfig.select`` (schema.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from suite.config.schema import MAX_ROUNDS, ConfigError, ModelConfig


def parse_batch_sizes_option(text: str, models: Iterable[ModelConfig] | Mapping[str, ModelConfig],
                             option: str = "--latency-batch-sizes") -> tuple[int, ...]:
    """``--latency-batch-sizes=1,8``: positive integers, each inside at least one selected model's
    batch_sizes range, so that an option never silently selects nothing."""
    chosen = list(models.values()) if isinstance(models, Mapping) else list(models)
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"{option}: give at least one batch size, e.g. {option}=1,8")
    sizes: list[int] = []
    for part in parts:
        try:
            batch = int(part)
        except ValueError:
            raise ConfigError(f"{option}: {part!r} is not an integer batch size") from None
        if batch < 1:
            raise ConfigError(f"{option}: batch size {batch} must be >= 1")
        if batch not in sizes:
            sizes.append(batch)
    for batch in sizes:
        if not any(min(m.batch_sizes) <= batch <= max(m.batch_sizes) for m in chosen):
            ranges = ", ".join(f"{m.name} {min(m.batch_sizes)}..{max(m.batch_sizes)}" for m in chosen)
            raise ConfigError(f"{option}: batch size {batch} is outside the batch_sizes range of every selected "
                              f"model ({ranges or 'no model selected'}), so no latency case would run")
    return tuple(sizes)


def check_rounds_option(value: Any, option: str = "--latency-rounds") -> int:
    """``--latency-rounds``: an integer in [2, MAX_ROUNDS] (one round has no spread; a billion runs until killed);
    0 must not mean 'the default'."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigError(f"{option}: {value!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{option}: expected an integer >= 2, got {value!r}")
    if value < 2:
        raise ConfigError(f"{option}: {value} rounds; a latency case needs at least 2 timed rounds")
    if value > MAX_ROUNDS:
        raise ConfigError(f"{option}: {value} rounds; at most {MAX_ROUNDS} timed rounds per case")
    return value
