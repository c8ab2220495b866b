"""What a model prints while preflight makes and runs it, hidden from the terminal and kept for the error.

Why at the file descriptors: a factory may print from C (a progress bar of a download, a warning of a C
extension); replacing sys.stdout alone would let those through, between pytest's own lines. The suite's own
progress lines (PROGRESS_PREFIX) still pass, as they are written."""

from __future__ import annotations

import codecs
import collections
import contextlib
import ctypes
import io
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

#: The suite's progress lines start with this (suite/hooks/startup_check.py): they reach the terminal while a model's
#: output is hidden.
PROGRESS_PREFIX = "[engine cache]"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
