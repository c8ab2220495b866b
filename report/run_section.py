"""The run: the environment keys that decide whether figures compare, how the run was made (config, engine
options, commit, command, baselines), pytest-html's run metadata moved here, the gates' coverage and the wall
time per phase. Its own module because it answers "what was tested, where and how", apart from the results."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from report.format import duration, env_value, one_line

#: (label, fingerprint keys) of the environment that decides whether figures compare.
KEY_ENVIRONMENT = (("device", ("device",)), ("GPU", ("gpu_name",)),
                   ("compute capability", ("gpu_compute_capability",)), ("driver", ("driver",)),
                   ("CUDA runtime", ("cuda_runtime",)), ("cuDNN", ("cudnn",)), ("torch", ("torch",)),
                   ("ONNX Runtime", ("onnxruntime", "onnxruntime-gpu")), ("TensorRT", ("tensorrt",)),
                   ("CPU", ("cpu",)), ("CPU int8 instructions", ("cpu_int8",)))
RUN_KEYS = (("config", "config file"), ("engine_options", "engine options"), ("git_commit", "git commit"),
            ("command", "command"), ("device", "device requested"), ("workers", "workers"))
#: Shown above or in the phases table; "test_times" (every test phase's start and seconds, suite/fleet/timeline.py
#: Timeline) is data for tools/compare_runs.py that --suite-results keeps: thousands of entries, no row of a table.
_RUN_SHOWN = {k for k, _ in RUN_KEYS} | {"phases", "wall_s", "test_times"}


def run_section(environment: Mapping[str, Any], run_info: Mapping[str, Any] | None,
                gate: Mapping[str, Any] | None) -> str:
    """The environment that matters, how the run was made, the gates' coverage and the wall time."""
    run_info = run_info or {}
    diffs = (gate or {}).get("environment_differences") or {}
    differing = {k for d in diffs.values() for k in d.get("keys", {})}
    rows = []
    for label, keys in KEY_ENVIRONMENT:
        present = [k for k in keys if environment.get(k) not in (None, "")]
        value = escape(" / ".join(f"{env_value(k, environment[k])}" + (f" ({k})" if len(keys) > 1 else "")
                                  for k in present)) if present else "-"
        cls = "drift" if any(k in differing for k in keys) else ""
        if keys[0] == "onnxruntime":
            value, flagged = _onnxruntime_value(environment, value)
            cls = cls or ("flag" if flagged else "")
        rows.append(f'<tr class="{cls}" data-key="{escape(keys[0])}"><th class="name">{escape(label)}</th>'
                    f'<td class="name">{value}</td></tr>')
    for key, label in RUN_KEYS:
        if key in run_info:
            rows.append(f'<tr data-key="{escape(key)}"><th class="name">{escape(label)}</th>'
                        f'<td class="name">{_run_value(key, run_info[key])}</td></tr>')
    for key in ("latency_baseline", "accuracy_baseline"):
        if (gate or {}).get(key):
            rows.append(f'<tr data-key="{key}"><th class="name">{key.replace("_", " ")}</th>'
                        f'<td class="name"><code>{escape(str(gate[key]))}</code></td></tr>')  # type: ignore[index]
    for key, value in run_info.items():
        if key not in _RUN_SHOWN:
            rows.append(f'<tr data-key="{escape(str(key))}"><th class="name">{escape(str(key).replace("_", " "))}'
                        f'</th><td class="name">{escape(one_line(value))}</td></tr>')
    parts = ['<h2 id="suite-run">The run</h2>',
             '<table class="suite run"><caption>What was tested, where and how<span class="detail">'
             "The environment keys that decide whether figures compare (the full fingerprint is at the end); "
             "'-': not in this run's fingerprint (not installed, or not a CUDA run); red: differs from a "
             "baseline's.</span></caption>"
             f"<tbody>{''.join(rows)}</tbody></table>", RUN_METADATA]
    parts.append(coverage_text(gate))
    parts.append(phases_table(run_info))
    return "\n".join(p for p in parts if p)


#: pytest-html's own "Environment" block (what --metadata and CI variables put there, pytest-metadata's own
#: keys dropped by report/plugin.py) sits above the verdict under the title "Environment", a second environment
#: table. The script moves it here, under the run, and retitles it; without scripts, CSS (STYLE) retitles it
#: in place (report/style.py builds that rule from this title). pytest-html's app.js fills the table by id,
#: wherever it is.
RUN_METADATA_TITLE = "Run metadata (--metadata, CI variables)"


RUN_METADATA = f"""<div id="suite-run-metadata"></div>
<script>
(function () {{
  var header = document.getElementById("environment-header"), table = document.getElementById("environment");
  var slot = document.getElementById("suite-run-metadata");
  if (!header || !table || !slot) return;
  var title = header.querySelector("h2");
  if (title) title.textContent = "{RUN_METADATA_TITLE}";
  header.classList.add("suite-moved");
  slot.appendChild(header);
  slot.appendChild(table);
}})();
</script>"""


#: Fingerprint keys that may name the onnxruntime module this process imported (suite/environment.py adds one
#: where it records onnxruntime.__version__; absent, the report says it cannot tell).
ONNXRUNTIME_IMPORTED_KEYS = ("onnxruntime_imported", "onnxruntime_module")


def _onnxruntime_value(environment: Mapping[str, Any], value: str) -> tuple[str, bool]:
    """ONNX Runtime's row: both the onnxruntime and onnxruntime-gpu distributions can be installed; they write
    the same `onnxruntime` module, so the files of whichever was installed last are the ones that ran. Shows the
    imported version where the fingerprint has it, else both, flagged, with a note."""
    cpu, gpu = environment.get("onnxruntime"), environment.get("onnxruntime-gpu")
    imported = next((environment[k] for k in ONNXRUNTIME_IMPORTED_KEYS if environment.get(k)), None)
    if not (cpu and gpu):
        return (value + (f" (imported: {escape(one_line(imported))})" if imported and imported not in (cpu, gpu)
                         else "")), False
    installed = f"installed: onnxruntime {one_line(cpu)}, onnxruntime-gpu {one_line(gpu)}"
    if imported:
        return f"{escape(one_line(imported))} (imported; {escape(installed)})", False
    providers = one_line(environment.get("onnxruntime_providers")) if environment.get("onnxruntime_providers") else ""
    return (value + '<span class="unit">both distributions are installed and write the same onnxruntime module: '
            "the one installed last is what ran, and this fingerprint does not say which"
            + (f" (its providers: {escape(providers)})" if providers else "") + "; uninstall one</span>"), True


def _run_value(key: str, value: Any) -> str:
    if key == "engine_options":
        if not value:
            return "none (engines' defaults)"
        if isinstance(value, Mapping):
            return "<br>".join(f"<b>{escape(str(k))}</b>: {escape(one_line(v))}" for k, v in value.items())
    if key in ("config", "command", "git_commit"):
        return f"<code>{escape(one_line(value))}</code>"
    return escape(one_line(value))


COVERAGE_NAMES = {"latency": ("latency gate", "cases"), "accuracy": ("accuracy/parity drift gate", "records")}


def coverage_text(gate: Mapping[str, Any] | None) -> str:
    """``gate["coverage"]``: {"latency": {"gated", "cases", "without_baseline", "absent_from_run"}, ...}."""
    coverage = (gate or {}).get("coverage") or {}
    if not coverage:
        return ""
    items = []
    for which, c in coverage.items():
        name, unit = COVERAGE_NAMES.get(which, (f"{which} gate", "cases"))
        text = f"<b>{escape(name)}</b>: gated {c.get('gated', 0)} of {c.get('cases', 0)} {unit}"
        text += f"; {c.get('without_baseline', 0)} without baseline"
        if c.get("absent_from_run") is not None:
            text += f"; {c['absent_from_run']} baseline {unit} absent from this run"
        if c.get("saved_busy"):
            text += f"; {c['saved_busy']} of the baseline's {unit} were saved busy (see the gate warnings)"
        items.append(f'<li data-gate="{escape(str(which))}">{text}</li>')
    return '<h3>Gate coverage</h3><ul class="coverage">' + "".join(items) + "</ul>"


def phases_table(run_info: Mapping[str, Any]) -> str:
    phases = run_info.get("phases") or {}
    if not phases and run_info.get("wall_s") is None:
        return ""
    rows = "".join(f'<tr><td class="name">{escape(str(k))}</td><td>{duration(v)}</td></tr>'
                   for k, v in phases.items() if v is not None)
    if run_info.get("wall_s") is not None:
        rows += f'<tr><td class="name"><b>whole run</b></td><td><b>{duration(run_info["wall_s"])}</b></td></tr>'
    return ('<table class="suite phases"><caption>Wall time per phase</caption><thead><tr>'
            f'<th class="name">phase</th><th>wall time</th></tr></thead><tbody>{rows}</tbody></table>')
