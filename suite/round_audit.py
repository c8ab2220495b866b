"""Which timed rounds of a latency case have their outputs kept and checked (issue 43), as MLPerf's audit TEST01
samples a performance run's responses: a uniform random sample of the rounds, drawn from the operating system's
randomness (no seed in the config or the process can tell an engine which rounds will be looked at), and settled
only when the last round is in (reservoir sampling, Vitter's algorithm R: a round kept early may give way to a later
one). Before it, only the first timed round and the last call were kept: an engine wrong in every round between
them (calls 8-45 of 46 returning zeros) passed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class RoundSample(Generic[T]):
    """A uniform sample of ``size`` of the rounds offered (every round when ``size`` is None); ``read()`` is
    called only for a round that enters the sample, so a round not drawn costs nothing."""

    def __init__(self, size: int | None, rng: random.Random | None = None) -> None:
        if size is not None and size < 1:
            raise ValueError(f"a round sample needs a size of at least 1, got {size}")
        self.size = size
        self.offered = 0
        self._rng = rng if rng is not None else random.SystemRandom()
        self._slots: list[tuple[int, T]] = []

    def offer(self, round_index: int, read: Callable[[], T]) -> None:
        self.offered += 1
        if self.size is None or len(self._slots) < self.size:
            self._slots.append((round_index, read()))
            return
        slot = self._rng.randrange(self.offered)
        if slot < self.size:
            self._slots[slot] = (round_index, read())

    def kept(self) -> dict[int, T]:
        """The rounds in the sample (round index -> what ``read`` gave), in round order."""
        return dict(sorted(self._slots, key=lambda kept: kept[0]))
