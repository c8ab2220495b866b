"""The verdict, first on the page: the run's one word and what is behind it (why, the error that stopped the run,
the counts, what was not tested, the gates' warnings, failed checks, latency regressions, what was not judged,
known failures). Its own module because it is the only section that reads the verdict (suite/verdict.py)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from report.cases import ENGINE_ORDER, PATH_ORDER, PRECISION_ORDER, cell_sort_key, path_sort_key
from report.format import first_line, fmt, ratio_interval, signed_pct

VERDICT_CLASS = {"passed": "passed", "failed": "failed", "not judged": "not-judged"}
#: Collapse a list of checks behind <details> beyond this many.
SHOW_CHECKS = 12


def verdict_section(verdict: Mapping[str, Any] | None, gate: Mapping[str, Any] | None,
                    records: Sequence[Mapping[str, Any]] = (), results_table: bool = True) -> str:
    """The run's one-word answer and everything behind it (suite/verdict.py ``Ledger.as_dict``), in the order a
    reader needs it: why, the counts, what was not tested here, the gates' warnings, failed checks, regressions,
    not-judged checks whose reason was not accepted (open), then accepted ones (folded), known failures.
    ``results_table``: the page holds pytest-html's results table (a merged night's page has none)."""
    if not verdict:
        return ('<section id="suite-verdict" class="verdict verdict-unknown"><h2>Verdict: <span class="word">'
                'not recorded</span></h2><p class="note">This run recorded no verdict (the suite\'s ledger did not '
                "reach the report); read the test outcomes below.</p>"
                + gate_warnings(gate) + _regressions(gate) + "</section>")
    word = str(verdict.get("verdict", "not judged"))
    parts = [f'<section id="suite-verdict" class="verdict verdict-{VERDICT_CLASS.get(word, "unknown")}" '
             f'data-verdict="{escape(word)}"><h2>Verdict: <span class="word">{escape(word)}</span></h2>']
    why = verdict.get("why") or []
    if why:
        parts.append('<ul class="why">' + "".join(f"<li>{escape(str(w))}</li>" for w in why) + "</ul>")
    elif word == "passed":
        parts.append("<p>Every check that was judged passed, and every check not judged was so for a reason "
                     "that was accepted.</p>")
    stopped, error = stopped_by_error(verdict)
    if stopped:
        parts.append(_error_box(verdict, error))
    parts.append(_counts(verdict, results_table))
    parts.append(thresholds_html(verdict))
    if not stopped:
        parts.append(not_tested_html(verdict, records))
    parts.append(gate_warnings(gate))
    if verdict.get("interrupted") and not stopped:
        parts.append(f'<p class="not-accepted">The run was interrupted: {escape(str(verdict["interrupted"]))}; '
                     "checks that never ended are not judged (interrupted).</p>")
    failed = verdict.get("failed") or []
    if failed:
        parts.append(f"<h3>Failed checks ({len(failed)})</h3>" + _check_list(failed, "failed"))
    parts.append(_regressions(gate))
    parts.append(not_judged_html(verdict, stopped))
    known = verdict.get("known_failures") or []
    if known:
        parts.append(f"<h3>Known failures ({len(known)})</h3><p class=\"note\">Declared in the config; they fail as "
                     "declared and do not fail the run (the day one passes, the run fails until its entry is "
                     "removed).</p>" + _check_list(known, "known-failure"))
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


#: suite/hooks/verdict_wiring.py's words in ``verdict["interrupted"]`` for a run that pytest stopped with a usage error
#: (4) or an internal error (3): before any test, or mid-way, for a reason no not-judged reason may excuse.
STOPPED_PREFIX = "stopped by"


def stopped_by_error(verdict: Mapping[str, Any]) -> tuple[bool, str | None]:
    """(whether a usage or internal error stopped the run, the error's message if the verdict carries one).
    The message is ``verdict["error"]`` (or ``"stopped_by"``), where the plugin records it; older verdicts
    hold only ``interrupted`` = 'stopped by a usage error'."""
    error = verdict.get("error") or verdict.get("stopped_by")
    interrupted = str(verdict.get("interrupted") or "")
    return bool(error) or interrupted.startswith(STOPPED_PREFIX), (str(error) if error else None)


def _error_box(verdict: Mapping[str, Any], error: str | None) -> str:
    what = str(verdict.get("interrupted") or "stopped by an error")
    text = (f'<pre class="error">{escape(error)}</pre>' if error else
            "<p>pytest printed the error in the terminal (the line starting <code>ERROR:</code>); this run's "
            "verdict does not carry its text.</p>")
    return (f'<div class="run-error"><h3>The run was {escape(what)}: nothing after it was judged</h3>{text}'
            "<p>Fix the error and run again. Not-judged (interrupted) checks here are the ones that never ran; "
            "accepting <code>interrupted</code> would not make them judged.</p></div>")


def gate_warnings(gate: Mapping[str, Any] | None) -> str:
    """``gate["warnings"]``: what the gates said about their own evidence (``--latency-baseline last:5`` that
    found 2 runs, cases saved to a baseline while the CPUs were busy), the terminal's WARNING lines."""
    found = [str(w) for w in (gate or {}).get("warnings") or [] if w]
    if not found:
        return ""
    return (f'<div class="gate-warnings"><h3>Gate warnings ({len(found)})</h3><p class="note">What the gates say '
            "about their own evidence (the terminal prints these as WARNING lines): read them before trusting a "
            'pass.</p><ul class="gate-warnings">' + "".join(f"<li>{escape(w)}</li>" for w in found) + "</ul></div>")


def thresholds_html(verdict: Mapping[str, Any]) -> str:
    """``verdict["thresholds_not_default"]``: each model and precision judged against thresholds its config sets apart
    from the precision's defaults (looser ones first to the eye): a pass means what these let through."""
    changed = verdict.get("thresholds_not_default") or {}
    if not changed:
        return ""
    rows = "".join(f"<li><b>{escape(str(cell))}</b>: "
                   + ", ".join(f'<span class="{"not-accepted" if "looser" in str(c) else "accepted"}">{escape(str(c))}'
                               "</span>" for c in changes) + "</li>"
                   for cell, changes in sorted(changed.items()))
    return ('<div class="thresholds"><h3>Thresholds other than the precision\'s defaults</h3><p class="note">The '
            "config sets these apart from README's &quot;Defaults per precision&quot;; a check passed against "
            f'them, not the defaults.</p><ul class="thresholds">{rows}</ul></div>')


def _counts(verdict: Mapping[str, Any], results_table: bool = True) -> str:
    counts = verdict.get("counts") or {}
    nj = counts.get("not_judged") or {}
    nj_total = sum(nj.values()) if isinstance(nj, Mapping) else int(nj or 0)
    items = [f"{counts.get('passed', 0)} passed", f"{counts.get('failed', 0)} failed",
             f"{counts.get('known_failures', 0)} known failure{'s' if counts.get('known_failures', 0) != 1 else ''}",
             f"{nj_total} not judged" + (" (" + ", ".join(f"{escape(str(r))} {n}" for r, n in nj.items()) + ")"
                                         if isinstance(nj, Mapping) and nj else "")]
    accepted = verdict.get("accepted") or []
    text = '<p class="counts"><b>Checks:</b> ' + " &middot; ".join(items) + "."
    if accepted:
        text += " Accepted not-judged reasons: " + ", ".join(f"<code>{escape(str(a))}</code>" for a in accepted) + "."
    if not results_table:
        return text + "</p>"
    return text + ('</p><p class="note counts-note">pytest-html\'s results table below shows each check as counted '
                   "here (report/results_table.py): a test pytest passed whose check was not judged (busy, "
                   "precision-not-run, ...) is a &quot;Not judged&quot; row, with its reason; skips with the same "
                   "reason and words are one row that counts them; its &quot;Errors&quot; are failures in setup "
                   "or teardown (a check whose test passed and whose teardown failed has both rows).</p>")


def _reason_status(reason: str, ok: bool, stopped: bool) -> str:
    if ok:
        return '<span class="accepted">accepted</span>: does not fail the run'
    if reason == "interrupted" and stopped:  # accepting it would hide that the run never ran
        return ('<span class="not-accepted">not accepted</span>: the run stopped before these checks ran; fix the '
                "error above and run again")
    return ('<span class="not-accepted">not accepted</span>: the run cannot pass (accept it with '
            f"<code>--accept-not-judged {escape(reason)}</code> if it is expected here)")


_NOT_JUDGED_PREFIX = re.compile(r"^not judged \([\w-]+\):\s*")


def _message(check: Mapping[str, Any]) -> str:
    return _NOT_JUDGED_PREFIX.sub("", first_line(check.get("detail"))) or "(no message)"


def message_groups(checks: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """(count, message) of checks with the same first line, most frequent first: 28 checks of one missing
    TensorRT are one line, not 28. Equal counts keep the order their messages first appear in (most_common's)."""
    return [(n, m) for m, n in Counter(map(_message, checks)).most_common()]


def not_judged_html(verdict: Mapping[str, Any], stopped: bool) -> str:
    """Not-judged checks by reason: reasons not accepted first, open (they decide the verdict); accepted ones
    folded behind <details>, their identical messages grouped ('28 x tensorrt is not installed ...')."""
    not_judged = verdict.get("not_judged") or {}
    if not not_judged:
        return ""
    accepted = set(verdict.get("accepted") or [])
    reasons = verdict.get("reasons") or {}
    total = sum(len(v) for v in not_judged.values())
    parts = [f"<h3>Not judged ({total})</h3>"]
    for reason in sorted(not_judged, key=lambda r: r in accepted):  # stable: the ledger's order within each
        checks = not_judged[reason]
        ok = reason in accepted
        head = (f"{escape(reason)}: {len(checks)} check{'s' if len(checks) != 1 else ''}; "
                f"{_reason_status(reason, ok, stopped)}")
        description = f'<p class="note">{escape(str(reasons.get(reason, "")))}</p>'
        groups = message_groups(checks)
        grouped = ('<ul class="messages">' + "".join(f"<li>{n} &times; {escape(m)}</li>" for n, m in groups)
                   + "</ul>")
        opening = (f'<div class="not-judged-reason" data-reason="{escape(reason)}" '
                   f'data-accepted="{"yes" if ok else "no"}">')
        if ok:
            n, m = groups[0]
            gist = f"{n} &times; {escape(_clip(m))}" + (
                f" and {len(groups) - 1} other message{'s' if len(groups) > 2 else ''}" if len(groups) > 1 else "")
            parts.append(f'{opening}<details class="accepted-reason"><summary><b>{head}</b>. {gist}</summary>'
                         f"{description}{grouped}<p class=\"note\">The checks:</p>"
                         f"{_check_list(checks, 'not-judged')}</details></div>")
        else:
            parts.append(f"{opening}<h4>{head}</h4>{description}"
                         + (grouped if len(groups) < len(checks) else "")
                         + f"{_check_list(checks, 'not-judged')}</div>")
    return "\n".join(parts)


#: The engine and precision in a check's test id: 'test_latency[resnet50-tensorrt-fp32-bs1-graph]'.
_ID_PARAMS = re.compile(r"\[([^\]]*)\]")


def _parse_check(check_id: str, engines: set[str]) -> tuple[str, str, str | None] | None:
    """(engine, precision, latency path or None) of a check's test id; None for ids without a cell."""
    match = _ID_PARAMS.search(check_id)
    if not match:
        return None
    tokens = match.group(1).split("-")
    for i in range(len(tokens) - 1):
        if tokens[i] in engines and tokens[i + 1] in PRECISION_ORDER:
            rest = tokens[i + 2:]
            path = None
            if "test_latency[" in check_id:
                path = rest[-1] if rest and rest[-1] in PATH_ORDER else "all"
            return tokens[i], tokens[i + 1], path
    return None


def _short(message: str) -> str:
    """The gist of a not-judged message: up to its first ' (', '; ' or ': ' past a few words."""
    cuts = [i for i in (message.find(" ("), message.find("; "), message.find(": ")) if i >= 15]
    text = message[:min(cuts)] if cuts else message
    return _clip(text)


def _clip(text: str) -> str:
    """At most 90 characters, an ellipsis ending what was cut: a message's gist on one line."""
    return text if len(text) <= 90 else text[:89] + "…"


def not_tested(verdict: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(what, why) for every engine, engine and precision, and engine and latency path of which no check ran
    here: every one of its checks was not judged and none left a record ('tensorrt', 'unavailable: tensorrt is
    not installed'). From the verdict's not-judged check ids and the records."""
    engines = set(ENGINE_ORDER) | {str(r["engine"]) for r in records if r.get("engine")}
    ran = [r for r in records if r.get("engine")]
    tested_engines = {str(r["engine"]) for r in ran}
    tested_cells = {(str(r["engine"]), str(r.get("precision"))) for r in ran}
    tested_paths = {(str(r["engine"]), str(r.get("path", "all"))) for r in ran if r.get("kind") == "latency"}
    for c in [*(verdict.get("failed") or []), *(verdict.get("known_failures") or [])]:  # they ran, and failed
        parsed = _parse_check(str(c.get("id")), engines)
        if parsed:
            tested_engines.add(parsed[0])
            tested_cells.add(parsed[:2])
            if parsed[2]:
                tested_paths.add((parsed[0], parsed[2]))
    untested: dict[str, list[tuple[str, str]]] = defaultdict(list)
    order: dict[str, tuple[Any, ...]] = {}
    for reason, checks in (verdict.get("not_judged") or {}).items():
        for c in checks:
            parsed = _parse_check(str(c.get("id")), engines)
            if not parsed:
                continue
            engine, precision, path = parsed
            if engine not in tested_engines:
                key, rank = engine, (0, cell_sort_key(engine, ""))
            elif (engine, precision) not in tested_cells:
                key, rank = f"{engine} {precision}", (1, cell_sort_key(engine, precision))
            elif path and (engine, path) not in tested_paths:
                key, rank = f"{engine} latency-{path}", (2, cell_sort_key(engine, ""), path_sort_key(path))
            else:
                continue
            untested[key].append((str(reason), _message(c)))
            order[key] = rank
    out = []
    for key in sorted(untested, key=lambda k: order[k]):
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for item in untested[key]:
            counts[item] += 1
        reason, message = max(counts, key=lambda k: counts[k])
        out.append((key, f"{reason}: {_short(message)}"))
    return out


def not_tested_html(verdict: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    found = not_tested(verdict, records)
    if not found:
        return ""
    return ('<p class="not-tested"><b>Not tested in this run:</b> '
            + "; ".join(f"<b>{escape(what)}</b> ({escape(why)})" for what, why in found)
            + '. <span class="note">Every check of these was not judged; their reasons are below.</span></p>')


def _check_list(checks: Sequence[Mapping[str, Any]], kind: str) -> str:
    items = []
    for c in checks:
        detail = first_line(c.get("detail"))
        # the comparisons behind the outcome, unless the detail already names the one that decided it
        bad = [comp for comp in c.get("components") or [] if comp.get("state") in ("failed", "not judged")
               and str(comp.get("label")) not in detail]
        sub = ""
        if bad:
            sub = "<ul>" + "".join(f"<li><code>{escape(str(comp.get('label')))}</code> {escape(str(comp.get('state')))}"
                                   + (f": {escape(first_line(comp.get('detail')))}" if comp.get("detail") else "")
                                   + "</li>" for comp in bad) + "</ul>"
        items.append(f'<li class="check" data-check="{escape(str(c.get("id")))}"><code>{escape(str(c.get("id")))}'
                     f"</code>" + (f": {escape(detail)}" if detail else "") + sub + "</li>")
    if len(items) <= SHOW_CHECKS:
        return f'<ul class="checks {kind}">' + "".join(items) + "</ul>"
    return (f'<ul class="checks {kind}">' + "".join(items[:SHOW_CHECKS]) + "</ul>"
            f"<details><summary>{len(items) - SHOW_CHECKS} more</summary><ul class=\"checks {kind}\">"
            + "".join(items[SHOW_CHECKS:]) + "</ul></details>")


def _regressions(gate: Mapping[str, Any] | None) -> str:
    found = [o for o in (gate or {}).get("latency") or [] if o.get("status") == "regression"]
    if not found:
        return ""
    rows = "".join(f'<tr class="regression"><td class="name">{escape(str(o.get("label")))}</td>'
                   f"<td>{fmt(o.get('baseline_median_ms'), 4)}</td><td>{fmt(o.get('current_median_ms'), 4)}</td>"
                   f"<td>{signed_pct(o.get('change_pct'))}</td>"
                   f"<td>{ratio_interval(o)}</td></tr>" for o in found)
    return (f"<h3>Latency regressions ({len(found)})</h3>"
            '<table class="suite verdict-regressions"><thead><tr><th class="name">case</th>'
            "<th>baseline median (ms)</th><th>current median (ms)</th><th>change</th><th>CI of ratio</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>")
