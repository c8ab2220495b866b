"""How often the suite's attribution names what really changed: seeded changes with their truth, scored.

Why: a report that says "largest changes: Attention_0 gone" is only useful if its first-named node is usually the one
that changed. tools/attribution_corpus.py makes real changes whose truth is known (a fusion turned off, one node
duplicated, one layer's weights perturbed...), runs the attribution the report runs, and hands each case here as an
``Outcome``: what the tool named, in its order, and the truth, as ``fnmatch`` patterns (where the truth is several
nodes, any of them counts). Pure: outcomes in, ranks, rates and markdown out.

The three kinds, each the first thing the report names for its kind of change:

- ``node``: the per-node profile's largest changes (metrics/node_profile.py ``node_deltas``), keys ``"<op> <node>"``;
- ``op``: the op types of "compute nodes as run" (metrics/structure.py ``changed_keys``), in the line's order;
- ``layer``: the localizer's first divergent layer, then the layers whose error rises most over their inputs', then
  its worst (metrics/localize.py), tensor names.

A case counts towards the rates only where the change is big enough to attribute: a latency change of at least
``MIN_LATENCY_CHANGE`` (either way) for ``node`` and ``op``, an output beyond the tolerance for ``layer``; the others
are listed with what they measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

KINDS = {
    "node": "latency: first-named node of the per-node profile",
    "op": "structure: op types of \"compute nodes as run\"",
    "layer": "numeric drift: the localizer's first divergent layer",
}
#: The latency change (fraction, either way) below which a case is not scored (issue 46's target: >= 3 %).
MIN_LATENCY_CHANGE = 0.03
TOP = (1, 3)


@dataclass(frozen=True)
class Outcome:
    """One seeded case and what the attribution named for it.

    ``effect``: the summed node time's relative change (``node``, ``op``), or the output's worst departure from the
    baseline's (``layer``: 1 - cosine); ``beyond``: whether it is big enough to be scored (see the module
    docstring); ``not_run``: why the case did not run here (a GPU-only change on a CPU), never a made-up result."""

    case: str
    kind: str
    model: str
    change: str
    truth: tuple[str, ...]
    named: tuple[str, ...] = ()
    effect: float = 0.0
    beyond: bool = False
    device: str = "CPU"
    not_run: str = ""

    @property
    def rank(self) -> int | None:
        """1-based position of the first named item that matches the truth; None if none does."""
        return rank_of(self.named, self.truth)

    @property
    def scored(self) -> bool:
        return not self.not_run and self.beyond


def matches(named: str, patterns: Iterable[str]) -> bool:
    """Whether ``named`` is the truth: equal to one of the patterns, or matched by it (``fnmatch``, case kept)."""
    return any(fnmatchcase(named, p) for p in patterns)


#: The truth of a change that changes no op type (an opset, a static batch): naming nothing is the right answer.
NO_CHANGE = "(no op changes)"


def rank_of(named: Sequence[str], truth: Sequence[str]) -> int | None:
    if NO_CHANGE in truth and not named:
        return 1
    return next((i + 1 for i, item in enumerate(named) if matches(item, truth)), None)


@dataclass(frozen=True)
class KindScore:
    kind: str
    cases: int  # ran
    scored: int  # ran and beyond the threshold
    hits: tuple[int, ...]  # per TOP: scored cases whose truth is within the first k named
    not_run: int

    def rate(self, k: int) -> float | None:
        return self.hits[TOP.index(k)] / self.scored if self.scored else None


def score(outcomes: Iterable[Outcome]) -> list[KindScore]:
    """Top-1 and top-3 per kind over the scored cases."""
    out = []
    listed = list(outcomes)
    for kind in KINDS:
        mine = [o for o in listed if o.kind == kind]
        scored = [o for o in mine if o.scored]
        hits = tuple(sum(1 for o in scored if o.rank is not None and o.rank <= k) for k in TOP)
        out.append(KindScore(kind, sum(1 for o in mine if not o.not_run), len(scored), hits,
                             sum(1 for o in mine if o.not_run)))
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _cell(text: str, width: int = 60) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[:width - 3] + "..."


def _effect(o: Outcome) -> str:
    if o.not_run:
        return "not run"
    if o.kind == "layer":
        return f"1-cos {o.effect:.2g}" + ("" if o.beyond else " (within tolerance)")
    if o.beyond:
        return f"{o.effect:+.1%}"
    return f"{o.effect:+.1%}" + (" (< 3 %)" if abs(o.effect) < MIN_LATENCY_CHANGE else " (not scored: see the change)")


def table(outcomes: Sequence[Outcome]) -> str:
    """The docs' tables: the rates per kind, then every case with its truth, what was named first and its rank."""
    lines = ["| attribution | cases run | scored | top-1 | top-3 | listed, not run here |", "|---|---|---|---|---|---|"]
    for s in score(outcomes):
        lines.append(f"| {KINDS[s.kind]} | {s.cases} | {s.scored} | {_pct(s.rate(1))} | {_pct(s.rate(3))} | "
                     f"{s.not_run} |")
    lines += ["", "| case | kind | device | change | truth | named first | rank | effect |",
              "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        first = "-" if o.not_run else _cell(o.named[0] if o.named else "(nothing)", 40)
        rank = o.not_run and _cell(o.not_run, 70) or (str(o.rank) if o.rank is not None else "miss")
        lines.append(f"| `{o.case}` | {o.kind} | {o.device} | {_cell(o.change)} | {_cell(', '.join(o.truth), 40)} | "
                     f"{first} | {rank} | {_effect(o)} |")
    return "\n".join(lines)
