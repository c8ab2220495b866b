"""A timed device call's launch hidden behind a spin queued ahead of it, so that CUDA events measure the device alone.

Why: a timed call starts with the start event on an idle GPU, which fires at once; the device then waits while the
host launches the work (a CUDA-graph replay's ``cudaGraphLaunch``: microseconds of host time that vary from process
to process). For a 40-microsecond replay that wait is a large part of the figure: such medians moved 3-7 % between
two identical runs on H100s and H200s (docs/gpu.md). NVBench's answer is a blocking kernel queued before the start
event; here it is a spin of a known length (``torch.cuda._sleep``): while it runs the host queues the start event and
the work, and the events then bracket the device's time only.

``LaunchCover`` decides how long the spin must be and checks, round by round, that it was long enough: a round whose
host queuing took longer than the spin was not covered; it is counted, and the spin doubles for the rounds after
(warm-up rounds come first, so it settles there). Pure Python: the engine supplies the spin and the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The spin's first length: well above a graph launch's host time (microseconds to a few tens), well below a round.
COVER_US = 100.0
#: The longest the spin may grow to; past this a round's host queuing is no launch but a stall.
MAX_COVER_US = 10_000.0


@dataclass
class LaunchCover:
    """How long to spin before each timed call (``cycles()``), and whether each round's launch was hidden
    (``observe(host_s)``, the host's seconds from queuing the spin to having queued the work)."""

    cycles_per_us: float
    cover_us: float = COVER_US
    max_us: float = MAX_COVER_US
    covered: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.cycles_per_us > 0:
            raise ValueError(f"LaunchCover: cycles_per_us must be positive, got {self.cycles_per_us!r}")

    def cycles(self) -> int:
        """The spin's length in device clock cycles, for the next round."""
        return max(1, round(self.cover_us * self.cycles_per_us))

    def observe(self, host_s: float) -> None:
        """One round: it was covered when the host had queued the work before the spin could end."""
        hidden = host_s * 1e6 < self.cover_us
        self.covered.append(hidden)
        if not hidden:
            self.cover_us = min(self.cover_us * 2, self.max_us)

    def summary(self, skip: int = 0) -> dict[str, Any]:
        """For the case's record: the spin's final length, and how many rounds after the first ``skip`` (the
        warm-up rounds) were not covered (their samples include some of the launch)."""
        timed = self.covered[skip:]
        return {"spin_us": round(self.cover_us, 1), "rounds": len(timed),
                "uncovered_rounds": sum(1 for hidden in timed if not hidden)}


def cycles_per_us(spin: Any, elapsed_ms: Any, cycles: int = 200_000) -> float:
    """The device's spin cycles per microsecond, measured: ``elapsed_ms(spin, cycles)`` times one spin of ``cycles``
    with CUDA events (after a first, untimed one). The SM clock varies (boost, power), so it is measured, not read
    from the device's nominal clock."""
    spin(cycles)
    ms = float(elapsed_ms(spin, cycles))
    if not ms > 0:
        raise RuntimeError(f"a spin of {cycles} cycles timed {ms!r} ms: cannot size the launch cover")
    return cycles / (ms * 1e3)
