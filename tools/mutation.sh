#!/usr/bin/env bash
# Mutation testing of what decides a verdict (issue 23, "No green over a wrong answer"): mutmut 3 mutates the run's
# verdict (suite/verdict.py), the latency gate's outcome mapping (suite/gate/latency.py: LatencyOutcome.component,
# LatencyChecks.check_latency, .busy_matters, .ungated; suite/gate/state.py: Gate.gated), the parity comparator (metrics/parity.py, parity_report.py) and every cache-key
# builder (engines/: the export, conversion, fusion and int8 keys, the TensorRT engine's, the AOTInductor
# package's, the TensorRT EP's engine directory, and the spec/profile parts they hold, core/inputs.py's among
# them), one change at a time, and runs the fast CPU tests that reach each mutated function ([tool.mutmut] in
# pyproject.toml). A mutant the tests do not notice "survives".
#
# Exit status: 0 when every survivor is listed, with why it is harmless, in docs/mutation-survivors.md; 1 when one
# is not (its diff is printed: kill it with a test, or list it with its reason); 2 when mutmut itself failed.
#   bash tools/mutation.sh            # everything above (mutants and minutes per target: docs/mutation-survivors.md)
#   bash tools/mutation.sh 'metrics.parity.*'   # only these mutants (mutmut's names, fnmatch patterns)
# MAX_CHILDREN: mutmut's worker processes (default: the CPU count). The run starts from a fresh mutants/ (mutmut
# reruns every mutant it is given by pattern anyway); mutants/ is left for `mutmut show NAME` / `mutmut browse`.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
[ -x "$BIN/mutmut" ] || BIN=$(dirname "$(command -v mutmut || echo /nonexistent/mutmut)")
[ -x "$BIN/mutmut" ] || { echo "mutation.sh: mutmut is not installed (pip install -e '.[dev]')" >&2; exit 2; }
PYTHON=$BIN/python
[ -x "$PYTHON" ] || PYTHON=python3
SURVIVORS=docs/mutation-survivors.md

# The mutants run (tools/mutation_targets.py lists them, and keeps each one's fingerprint in SURVIVORS): whole
# modules where the module is the verdict's logic, the named functions elsewhere (the rest of those files builds,
# times or reports, and is tested by the slower tests). The names are mutmut's: module path, then x_FUNCTION or
# xǁCLASSǁMETHOD, then __mutmut_N.
mapfile -t DEFAULT_PATTERNS < <("$PYTHON" tools/mutation_targets.py --patterns)
if [ $# -gt 0 ]; then PATTERNS=("$@"); else PATTERNS=("${DEFAULT_PATTERNS[@]}"); fi

rm -rf mutants
start=$(date +%s)
echo "mutation.sh: mutmut $("$BIN/mutmut" --version | awk '{print $NF}') over ${#PATTERNS[@]} pattern(s)"
log=$(mktemp)
# mutmut prints a progress line per mutant; keep its log, show its summary.
"$BIN/mutmut" run ${MAX_CHILDREN:+--max-children "$MAX_CHILDREN"} "${PATTERNS[@]}" >"$log" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
if [ $status -ne 0 ]; then
  tail -n 60 "$log"
  echo "mutation.sh: mutmut run failed (exit $status) after ${elapsed}s; log: $log" >&2
  exit 2
fi
tr '\r' '\n' <"$log" | grep -E "mutations/second|done in" | tail -n 3
"$BIN/mutmut" export-cicd-stats >/dev/null 2>&1 || true  # mutants/mutmut-cicd-stats.json, for CI's artifacts

"$BIN/mutmut" results --all true >"$log.results" 2>/dev/null
"$PYTHON" - "$log.results" "$SURVIVORS" "$elapsed" "$BIN/mutmut" "${PATTERNS[@]}" <<'EOF'
import fnmatch
import re
import subprocess
import sys
from collections import Counter

results_file, survivors_file, elapsed, mutmut, *patterns = sys.argv[1:]
status = {}
for line in open(results_file, encoding="utf-8"):
    name, sep, state = line.strip().rpartition(": ")
    if sep and any(fnmatch.fnmatchcase(name, p) for p in patterns):
        status[name] = state
counts = Counter(status.values())
if not status or set(counts) == {"not checked"}:
    sys.exit(f"mutation.sh: no mutant matched {patterns} (see `mutmut results --all true`)")
# 'no tests': no selected test reaches the function, so nothing could kill it: a survivor like any other.
alive = {n: s for n, s in status.items() if s in ("survived", "no tests")}
listed = {}
for line in open(survivors_file, encoding="utf-8"):
    m = re.match(r"^- `([^`]+)`: (.+)$", line.strip())
    if m:
        listed[m.group(1)] = m.group(2)
unexplained = sorted(set(alive) - set(listed))
stale = sorted(n for n in listed if n in status and n not in alive)
total = len(status)
killed = counts["killed"] + counts["timeout"]
print(f"mutation.sh: {total} mutants in {elapsed}s: {killed} killed ({counts['timeout']} by timeout), "
      f"{counts['survived']} survived, {counts['no tests']} without a test reaching them"
      + "".join(f", {n} {s}" for s, n in sorted(counts.items())
                if s not in ("killed", "timeout", "survived", "no tests")))
print(f"mutation.sh: {len(alive) - len(unexplained)} survivor(s) explained in {survivors_file}, "
      f"{len(unexplained)} unexplained")
for name in stale:
    print(f"mutation.sh: listed in {survivors_file} but {status[name]} now (remove it): {name}")
SHOWN = 40  # `mutmut show` takes a second each; the rest by name
for name in unexplained[:SHOWN]:
    diff = subprocess.run([mutmut, "show", name], capture_output=True, text=True).stdout
    print(f"\n{name}: {alive[name]}, and not in {survivors_file}")
    print("\n".join(line for line in diff.splitlines()[1:] if not line.startswith(("---", "+++"))))
if unexplained[SHOWN:]:
    print(f"\n... and {len(unexplained) - SHOWN} more (mutmut show NAME):")
    print("\n".join(f"  {name}: {alive[name]}" for name in unexplained[SHOWN:]))
sys.exit(1 if unexplained else 0)
EOF
verdict=$?
# No unexplained survivor: these patterns' code is what was tested; record its fingerprints, so that a later change
# of it without a mutation run fails tests/selftest/test_mutation_drift.py (the list cannot drift).
if [ $verdict = 0 ]; then
  "$PYTHON" tools/mutation_targets.py --record "${PATTERNS[@]}" && echo "mutation.sh: fingerprints recorded in $SURVIVORS"
fi
exit $verdict
