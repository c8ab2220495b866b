"""Preflight's errors: one line per model that failed, naming the config key to fix, with what the model printed
under it; and the two ways every check words a model's own complaint."""

from __future__ import annotations

from suite.config import ConfigError
from suite.preflight.output import HiddenOutput


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


def last_line(exc: BaseException) -> str:
    """The exception's type and the last non-empty line of its message: what the model says went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def strip_where(message: str, where: str) -> str:
    """resolve()'s message starts with the location we already name."""
    return message.removeprefix(f"{where}: ")
