#!/usr/bin/env bash
# The gates' acceptance check on the machine at hand (docs/gating.md, "Self-check"): a baseline run,
# an A/A run that must pass (and writes the HTML report), a run with a 5 % injected slowdown whose
# latency cases must fail, and a run with an injected accuracy drop whose drift gate must fail.
#   bash tools/gate_selfcheck.sh                                  # CPU, the tiny self-test config
#   DEVICE=cuda:0 SUITE_CONFIG=suite-gpu.toml MODELS=digits_cnn,resnet18 LATENCY_MODELS=resnet18 ENGINES=torch \
#     PRECISIONS=fp32,fp16 BATCHES=32 PATHS=model ROUNDS=300 DROP=1% bash tools/gate_selfcheck.sh
# LATENCY_MODELS: the models whose latency cases are timed (default: steady). Pick cases whose run-to-run
# noise tools/gate_calibration.py measured well under 1 %: a noisy case is not what this checks.
# Exit status 0 when all four runs behave as required. Logs and the report go to RESULTS (/tmp/gate-selfcheck).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
RESULTS=${RESULTS:-${TMPDIR:-/tmp}/gate-selfcheck}
WORK=$(mktemp -d)
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1
args=(-p no:cacheprovider -q -rf --color=no --device "${DEVICE:-cpu}"
      --suite-config "${SUITE_CONFIG:-tests/selftest/data/tiny_suite.toml}" --models "${MODELS:-tiny,steady}"
      --engine-cache "${ENGINE_CACHE:-$WORK/cache}" --benchmark-storage "file://$WORK/benchmarks")
# The steady model spins on the wall clock, so a busy machine cannot move it: judge it whatever the load.
args+=(--latency-busy-limit "${BUSY_LIMIT:-$([ "${LATENCY_MODELS:-steady}" = steady ] && echo 100% || echo 20%)}")
[ -n "${ENGINES:-}" ] && args+=(--engines "$ENGINES")
[ -n "${PRECISIONS:-}" ] && args+=(--precisions "$PRECISIONS")
[ -n "${BATCHES:-}" ] && args+=(--latency-batch-sizes "$BATCHES")
[ -n "${PATHS:-}" ] && args+=(--latency-paths "$PATHS")
[ -n "${ROUNDS:-}" ] && args+=(--latency-rounds "$ROUNDS")
latency_k="not test_latency"
IFS=, read -r -a latency_models <<<"${LATENCY_MODELS:-steady}"
for m in "${latency_models[@]}"; do latency_k+=" or $m"; done
args+=(-k "$latency_k")
tests=(tests/latency/test_latency.py tests/accuracy tests/parity/test_parity.py::test_parity_on_dataset)
run() { local name=$1; shift; "$PYTHON" -m pytest "${tests[@]}" "${args[@]}" "$@" >"$RESULTS/$name.log" 2>&1; echo $?; }
verdict=0
check() {  # check NAME WANT GOT [grep pattern that must appear in the log]
  local ok=1
  [ "$3" = "$2" ] || ok=0
  [ -z "${4:-}" ] || grep -q -- "$4" "$RESULTS/$1.log" || ok=0
  if [ $ok = 1 ]; then echo "PASS  $1 (exit $3)"; else echo "FAIL  $1: exit $3, wanted $2${4:+ and '$4' in $RESULTS/$1.log}"; verdict=1; fi
}
# The baseline run has no latency baseline: its cases are not judged (no-baseline), which it accepts beside the
# config's reasons, so that it passes (an accuracy baseline must come from a run that passed).
accept=$("$PYTHON" -c "import sys; from suite.config import load_config
print(','.join(dict.fromkeys(load_config(sys.argv[1]).accept_not_judged + ('no-baseline',))))" \
  "${SUITE_CONFIG:-tests/selftest/data/tiny_suite.toml}")
check baseline 0 "$(run baseline --benchmark-save base --suite-results "$RESULTS/baseline.json" \
  --accept-not-judged "$accept")"
check aa 0 "$(run aa --latency-baseline latest --accuracy-baseline "$RESULTS/baseline.json" \
  --html "$RESULTS/report.html" --self-contained-html)" "latency gate:"
check slowdown 1 "$(run slowdown -m latency --latency-baseline latest --inject-slowdown 5%)" "latency regression: median"
check accuracy-drop 1 "$(run accuracy-drop -m "accuracy or parity" --accuracy-baseline "$RESULTS/baseline.json" \
  --inject-accuracy-drop "${DROP:-10%}")" "drift against the baseline: FAILED"
for name in aa slowdown accuracy-drop; do
  echo "--- $name"
  awk '/latency gate:|drift gate:/{on=1} on{print} /^(cases|records): /{on=0}' "$RESULTS/$name.log"
done
rm -rf "$WORK"
exit $verdict
