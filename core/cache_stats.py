"""What the cache did in a run: its events (hit, build, wait, corrupt rebuild) and their counts.

Why a module of its own: the counts travel (each pytest-xdist worker sends its ``CacheStats.as_dict`` to the
controller, which adds them up) and are printed (the summary's ``engine cache:`` line); the cache only records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CacheEvent:
    kind: str
    label: str
    key: str
    action: str  # "hit", "start" (a build begins), "build", "rebuild-corrupt", "wait" (another process builds it)
    seconds: float = 0.0
    detail: str = ""


@dataclass
class CacheStats:
    hits: int = 0
    builds: int = 0
    build_seconds: float = 0.0
    events: list[CacheEvent] = field(default_factory=list)
    waits: int = 0
    wait_seconds: float = 0.0

    @property
    def corrupt_rebuilds(self) -> list[CacheEvent]:
        return [e for e in self.events if e.action == "rebuild-corrupt"]

    def summary_line(self) -> str:
        line = f"engine cache: {self.hits} hits, {self.builds} builds, {self.build_seconds:.1f} s building"
        if self.waits:
            line += f", {self.waits} wait{'s' if self.waits != 1 else ''} ({self.wait_seconds:.1f} s)"
        return line

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form, so pytest-xdist workers can send their stats to the controller.

        Hit events are left out (the count says all); build and corrupt-rebuild events are kept.
        """
        return {"hits": self.hits, "builds": self.builds, "build_seconds": self.build_seconds,
                "waits": self.waits, "wait_seconds": self.wait_seconds,
                "events": [asdict(e) for e in self.events if e.action != "hit"]}

    @classmethod
    def from_dict(cls, data: Any) -> CacheStats:
        """Inverse of ``as_dict``; a malformed record is a ValueError naming the field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"cache stats record is a {type(data).__name__}, not a mapping")
        stats = cls()
        for name, kinds in (("hits", (int,)), ("builds", (int,)), ("waits", (int,)),
                            ("build_seconds", (int, float)), ("wait_seconds", (int, float))):
            value = data.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
                what = "a count" if kinds == (int,) else "a number of seconds"
                raise ValueError(f"cache stats record: {name} is {value!r}, not {what}")
            setattr(stats, name, value if kinds == (int,) else float(value))
        events = data.get("events", [])
        if not isinstance(events, list):
            raise ValueError(f"cache stats record: events is a {type(events).__name__}, not a list")
        for i, event in enumerate(events):
            try:
                stats.events.append(CacheEvent(**event))
            except TypeError as exc:
                raise ValueError(f"cache stats record: events[{i}] is not a cache event ({exc}): {event!r}") from exc
        return stats

    def __add__(self, other: CacheStats) -> CacheStats:
        """Stats of several processes added up: ``sum(workers, CacheStats())``."""
        if not isinstance(other, CacheStats):
            return NotImplemented
        return CacheStats(hits=self.hits + other.hits, builds=self.builds + other.builds,
                          build_seconds=self.build_seconds + other.build_seconds,
                          events=[*self.events, *other.events], waits=self.waits + other.waits,
                          wait_seconds=self.wait_seconds + other.wait_seconds)
