"""The golden run's two outputs as stable text (tests/selftest/test_golden.py): the terminal summary the suite prints
and its HTML report, each turned into lines that keep what the run says (sections and their titles, case names,
verdicts, counts, reasons, figures) and mask what legitimately changes from run to run and machine to machine.

Masking is narrow on purpose: each rule below names one kind of value (a duration, a date, a version, a hash, a
path of this run, an error figure at rounding level, the machine's fingerprint) and replaces only it, with a token
that says what was there (``<s>``, ``<date>``, ``<version>``...). A changed verdict, count, section title, case name
or reason stays in the text and shows as a diff. The HTML is read with html.parser, element by element, not as bytes:
a heading, paragraph, list item, caption or table row is one line, with the attributes that carry meaning (a
section's verdict, a table's class and model, a row's cell); pytest-html's results table, which its JavaScript
builds from a JSON blob, is read from that blob (each row's result, test id and the first lines of its log).
"""

from __future__ import annotations

import html as htmllib
import json
import re
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser

# ---- masks, applied to every line of both outputs, in this order --------------------------------------------------

#: (pattern, replacement, what it masks): each one kind of value that changes between runs or machines.
MASKS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"\b\d{1,2}-[A-Z][a-z]{2}-\d{4} at \d{2}:\d{2}:\d{2}\b"), "<date>", "pytest-html's report date"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?\b"), "<date>", "an ISO date (a census's run)"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}\b"), "<duration>", "pytest-html's durations (HH:MM:SS)"),
    (re.compile(r"\bv?\d+\.\d+\.\d+(?:[.+-]?[A-Za-z0-9]+)*"), "<version>", "a library's version"),
    (re.compile(r"\bsha256:[0-9a-f]+"), "sha256:<hash>", "a content digest"),
    (re.compile(r"\b(?:\d+(?:\.\d+)?e-(?:0[4-9]|[1-9]\d)|0\.000\d+)\b"), "<err>",
     "an error figure below 1e-3 (MAE, max abs error: the kernels' and the CPU's own rounding)"),
    (re.compile(r"\b\d+ ms\b"), "<duration>", "pytest-html's durations (under a second)"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?s\b"), "<s>", "a duration in seconds"),
)

#: Lines (terminal) and run-table rows (HTML, after their [data-key=...]) that are timings through and through: every
#: number in them is masked.
TIMING_LINES = ("time per phase:", "worker time", "outside the tests:", "milestones")

#: Rows of the report's run table (data-key) whose value is the machine's, not the run's: masked whole.
MACHINE_KEYS = frozenset({"gpu_name", "gpu_compute_capability", "driver", "cuda_runtime", "cudnn", "torch",
                          "onnxruntime", "tensorrt", "cpu", "cpu_int8", "git_commit"})

#: Columns whose every value is the checkout's, not the run's: the ONNX exporter writes each node's source stack (the
#: file paths of the checkout and the venv) into the model, so an engine's size follows where the tree lies.
MACHINE_COLUMNS = frozenset({"size (MB)"})

#: Rows of the report's fingerprint whose value is the run's, not the machine's: kept.
FINGERPRINT_KEPT = ("device", "worker_count")
LIBRARY_ROWS = "<library> | <version>"

VERSION = re.compile(r"^\d+(\.\d+)+")
NUMBER = re.compile(r"(?<![\w<])[+-]?\d+(?:\.\d+)?(?![\w>])")


def mask(line: str, paths: Mapping[str, str]) -> str:
    """One line with this run's paths replaced by their names (``paths``: path -> ``<work>``, longest first) and
    every rule of MASKS applied; a timing line has all its numbers masked."""
    for path, name in sorted(paths.items(), key=lambda item: -len(item[0])):
        line = line.replace(path, name)
    for pattern, replacement, _ in MASKS:
        line = pattern.sub(replacement, line)
    if re.sub(r"^\s*\[[^\]]*\] ", "", line).lstrip().startswith(TIMING_LINES):
        line = NUMBER.sub("<t>", line)
    return line


# ---- the terminal --------------------------------------------------------------------------------------------------

#: pytest's section header: a title within a fill of = or - (one character each side when the title is long: the
#: html report's line, whose length is its path's).
HEADER = re.compile(r"^([=_-])\1* (.+?) \1+$")
#: pytest's own sections left out: their lines come from the Python environment (a warning of the plugins' import
#: order, its pytest's line numbers), not from the run.
TERMINAL_LEFT_OUT = ("warnings summary",)


def terminal_text(stdout: str, paths: Mapping[str, str]) -> str:
    """The summary the run printed after its progress line: every section from the first header on (the suite's
    engines table, phases, cache line, pytest's stats line, the verdict block), headers without their fill, runs of
    spaces in a line made one, masked; pytest's warnings summary left out and the stats line's warning count with it."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if HEADER.match(line)), len(lines))
    out: list[str] = []
    skipping = False
    for line in lines[start:]:
        header = HEADER.match(line)
        if header:
            skipping = header[2] in TERMINAL_LEFT_OUT
            if not skipping:
                out.append(f"{header[1] * 2} {mask(header[2], paths)} {header[1] * 2}")
            continue
        if skipping or not line.strip():
            continue
        indent = line[: len(line) - len(line.lstrip())]
        body = re.sub(r"\s{2,}", " ", line.strip())
        body = re.sub(r", \d+ warnings?\b", "", body)  # pytest's stats line: warnings of the environment
        out.append(mask(indent + body, paths))
    return "\n".join(out) + "\n"


# ---- the HTML report -----------------------------------------------------------------------------------------------

#: Elements whose text is one line each.
BLOCKS = frozenset({"h1", "h2", "h3", "h4", "p", "li", "caption", "tr", "summary", "figcaption", "div", "section",
                    "table", "ul", "details", "footer", "figure"})
#: Elements whose content is not text a reader sees: styles, scripts, pytest-html's row templates.
SKIPPED = frozenset({"style", "script", "template", "head"})
#: pytest-html's own page furniture (its filter hint, reload notice and show/hide buttons), by class: its words, not
#: the run's, and they change with its version.
FURNITURE = frozenset({"filter", "summary__reload", "collapse"})
#: Attributes that carry meaning, written in a line's [...] where the element opens.
MEANING = ("id", "data-verdict", "data-model", "data-dataset", "data-cell", "data-reason", "data-accepted",
           "data-key")


class _Text(HTMLParser):
    """The page as lines: block elements start a new line, table cells are joined with ' | '; a section, a table
    and a div with meaningful attributes open a marker line ``[table suite parity data-model=tiny ...]``, a row or
    list item carries its marker in front; text is unescaped and its whitespace made single."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.current: list[str] = []
        self.skip = 0
        self.furniture: list = []  # [tag, depth] while inside pytest-html's furniture
        self.blob: str | None = None
        self.row_key: str | None = None
        self.row_marks = ""
        self.table: list[str] = []
        self.head = False
        self.cells = 0
        self.header: list[str] = []  # the current table's column names

    def _flush(self) -> None:
        text = re.sub(r"\s+", " ", "".join(self.current)).strip(" |")
        if text:
            self.lines.append(text)
        self.current = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if "data-jsonblob" in values:
            self.blob = values["data-jsonblob"]
        if self.furniture:
            self.furniture[1] += tag == self.furniture[0]
            return
        if tag in ("p", "div") and values.get("class") in FURNITURE:
            self.furniture = [tag, 1]
            return
        if tag in SKIPPED:
            self.skip += 1
            return
        if self.skip:
            return
        if tag in BLOCKS:
            self._flush()
        marks = [f"{k}={values[k]}" for k in MEANING if values.get(k)]
        kind = f"{tag} {values['class']}" if values.get("class") else tag
        if tag == "table":
            self.table.append(values.get("class", ""))
            self.header = []
        if tag == "thead":
            self.head = True
        if tag == "tr":
            self.row_key = values.get("data-key")
            self.row_marks = f"[{' '.join([kind, *marks])}] " if marks or values.get("class") else ""
        elif tag == "li" and marks:
            self.current.append(f"[{' '.join(marks)}] ")
        elif tag in ("section", "table") or (tag == "div" and marks):
            self.lines.append(f"[{' '.join([kind, *marks])}]")
        if tag == "img":
            self.current.append(f"[image: {values.get('alt', '')}]")
        if tag in ("span", "br"):
            self.current.append(" ")  # a caption's detail, a figure's unit: words apart, as the page shows them
        if tag in ("td", "th") and self.cells:
            self.current.append(" | ")
        if tag in ("td", "th"):
            self.cells += 1

    def handle_endtag(self, tag: str) -> None:
        if self.furniture:
            self.furniture[1] -= tag == self.furniture[0]
            if not self.furniture[1]:
                self.furniture = []
            return
        if tag in SKIPPED:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag == "tr":
            self._row()
        elif tag in BLOCKS:
            self._flush()
        if tag == "table" and self.table:
            self.table.pop()
        if tag == "thead":
            self.head = False

    def _row(self) -> None:
        """A table row; in the run table and the fingerprint, a value of the machine's is masked whole."""
        text = re.sub(r"\s+", " ", "".join(self.current)).strip(" |")
        self.current, self.cells = [], 0
        if not text:
            return
        table = self.table[-1] if self.table else ""
        name, _, value = text.partition(" | ")
        if self.head:
            self.header = text.split(" | ")
        elif not value:
            pass
        elif table == "suite run" and self.row_key in MACHINE_KEYS:
            text = f"{name} | <machine>"
        elif table == "suite environment" and name not in FINGERPRINT_KEPT:
            # the libraries' rows are those the venv holds (a GPU set-up has more): one line for each run of them
            if VERSION.match(value):
                if self.lines and self.lines[-1] == LIBRARY_ROWS:
                    return
                text = LIBRARY_ROWS
            else:
                text = f"{name} | <machine>"
        elif any(c in MACHINE_COLUMNS for c in self.header):
            cells = text.split(" | ")
            if len(cells) == len(self.header):
                text = " | ".join("<machine>" if h in MACHINE_COLUMNS else c for h, c in zip(self.header, cells,
                                                                                             strict=True))
        self.lines.append(self.row_marks + text)

    def handle_data(self, data: str) -> None:
        if not self.skip and not self.furniture:
            self.current.append(data)


def report_text(html: str, paths: Mapping[str, str]) -> str:
    """The report as masked lines: the page's visible text in order (the suite's sections within pytest-html's
    summary, its counters), then pytest-html's results table from its JSON blob."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    parser._flush()
    lines = [mask(line, paths) for line in parser.lines]
    if parser.blob is not None:
        lines += ["", "== pytest-html's results table (its JSON blob) =="]
        lines += [mask(line, paths) for line in _results_table(json.loads(htmllib.unescape(parser.blob)))]
    return "\n".join(lines) + "\n"


def _results_table(data: Mapping) -> Iterable[str]:
    """pytest-html's environment block and rows: result, test id and the log's lines up to its captured output
    (the captured log says which test built an engine, and when: the order of the run, not its verdict)."""
    for key, value in sorted((data.get("environment") or {}).items()):
        yield f"environment: {key} = {value}"
    for test_id, rows in (data.get("tests") or {}).items():
        for row in rows:
            yield f"{row.get('result')} | {test_id}"
            for line in str(row.get("log", "")).splitlines():
                if re.match(r"^-+ Captured ", line):
                    break
                if line.strip() and line.strip() != "No log output captured.":
                    yield f"    {line.rstrip()}"
