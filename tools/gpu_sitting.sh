#!/usr/bin/env bash
# One GPU sitting's measurements, one part per device run (each well inside the 10-minute limit), so that
# the figures in docs/gating.md, docs/gpu.md and docs/transformer.md can be made again:
#   source /tmp/stage/install.sh && bash tools/gpu_sitting.sh PART [pytest options]     (after ../shared/device/README.md)
# PART: tier      ResNet-50 through the whole tier on every visible GPU (-n auto --device cuda): report, results
#       study     device- vs host-bound cases across 5 quiet processes and 2 with every CPU busy
#       rebuild   --rebuild-check 2 on ResNet-50: ONNX Runtime CUDA fp16 and inductor fp32
#       shapes    ONNX Runtime CUDA fp16 ResNet-50, static against dynamic batch, batch 1/32/256
#       minilm    MiniLM-L6 (and ORT's fused graph) on every engine and precision: parity, latency per batch x
#                 sequence, harness overhead against the bare module
#       bisect    EfficientNet-Lite0 int8 on ONNX Runtime's CPU EP of this machine's CPU (the known failure was
#                 found on another CPU than our dev VM's): localization and the optimization-level bisect
#       refusal   suite-gpu.toml as a nightly would run it where TensorRT is missing: pytest must fail, naming it
#                 (the part exits 0 only then)
#       localize  the fp16-overflow models of the self-tests through the suite on CUDA (torch, ORT CUDA EP;
#                 --localize), and tools/localize.py with the bisect and the CUDA EP's settings on them, on
#                 EfficientNet-Lite0 int8 and on ResNet-18 fp16
#       localize-minilm  tools/localize.py with the bisect and the CUDA EP's settings on MiniLM-L6 (fp16, bf16)
#                 and on ONNX Runtime's fused graph of it (fp32, fp16)
#       night     the whole suite-gpu.toml (engines torch, onnxruntime, inductor) in ONE pytest command, as the
#                 nightly gate runs it: -n auto, one worker per visible GPU (CUDA_VISIBLE_DEVICES=0: one GPU).
#                 LABEL names its files (default night); nvidia-smi samples each GPU's memory every second
#                 beside it, an independent check of the suite's own peak figures. Extra options narrow it
#                 (--models resnet50: one model's peak alone). Its latency has no baseline: no-baseline is
#                 accepted here, as on the nightly's first nights, so the verdict is the checks' own
#       build     the engine cache filled for night, nothing else timed: night's engines and options, its
#                 test_parity_at_every_engine_batch alone (every cell's engine, and a static_batch cell's at every
#                 batch night meets): a sitting's cold run then pays its builds (341-372 s summed over two
#                 workers) and little else, not a whole night (420-465 s of wall), so that four warm runs after it
#                 (one GPU, two, two, one: ABBA) fit the 1,800 s. LABEL as night's (default build)
#       nights    a sequence of whole-tier nights on this machine, each gated as the nightly workflow gates it
#                 (.github/workflows/nightly-gpu.yml, docs/nightly.md "A night, step by step"), nothing changed in
#                 between: NIGHTS="1 2 2 1" runs one night per entry, the entry its GPU count (1:
#                 CUDA_VISIBLE_DEVICES=0, 2: 0,1), labelled n1, n2, ... Night's pytest command (tier_night) with the
#                 workflow's options: --benchmark-save nightly, --benchmark-json, --suite-results, its accept list
#                 (unsupported,no-data,inconclusive,no-baseline), --accuracy-baseline = the last kept results.json
#                 and, once LATENCY_MIN_RUNS (2) nights are kept, --latency-baseline=last:K, K the kept runs last:5
#                 finds (at most NIGHTS_K, 5; the same runs as the workflow's last:5). A night that passed (exit 0,
#                 its results and saved run complete) is kept; a failed, not-judged or cut-off one is not.
#                 "N:TAG" (e.g. "1:inject") adds the pytest options of env NIGHT_EXTRA_TAG, word-split (e.g.
#                 NIGHT_EXTRA_inject="--inject-slowdown 10%"), and such a night is never kept. The state lives in
#                 NIGHTS_STATE (/tmp/nights): kept/ (the kept storage and results.json; KEPT overrides it),
#                 counter (the last night's number: a later call continues the sequence), history.tsv, runs/
#                 (every night's results and benchmark JSON); each night's storage is a fresh copy of the kept one
#                 under $BENCH/nights-work. Per night $OUT gets nK.tail.txt (the log's last 60 lines) and nK.tar.gz
#                 (log, results, benchmark JSON, nvidia-smi samples, notes, gpu.txt, cpu.txt), and nights.md,
#                 tools/night_table.py over every night so far: at most 3 nights per device call (8 files)
#       kernelcal tools/gate_calibration.py on ResNet-50 torch fp16 graph (CAL_BATCHES, default 32 and 1): a 2 %
#                 slowdown made by a real spin kernel after the module (--inject-kernel), 2 % gate, last:1/3/5
#       contention one model's cells alone on GPU 0, then on GPU 0 and GPU 1 at once, in turn (CONTENTION_REPEATS,
#                 3): does the other GPU's process slow this one's tests (the two-GPU night's growth)?
#       firstcall tools/first_call_probe.py: the torch fp32 reference's first and second call at each batch in a
#                 fresh process, per model and setting (default, cudnn.benchmark, cuDNN off; FIRSTCALL_MODELS): what a
#                 worker new to a model pays again (issue 22, the kin split)
#       explain   ResNet-50 torch fp16 latency with --kernel-profile, then channels_last = false gated against it:
#                 what moved, the kernels behind it, the SM clocks (issue 26)
# Results go under $OUT (the device tool's folder) or gpu-results/; the engine cache under $ENGINE_CACHE.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PART=${1:?part: tier | study | rebuild | shapes | minilm | bisect | refusal | localize | localize-minilm | night | build | nights | kernelcal | contention | firstcall | explain}
shift
EXTRA=("$@")   # more pytest options for the part (e.g. --engines onnxruntime,inductor)
OUT=${OUT:-gpu-results}
CACHE=${ENGINE_CACHE:-/tmp/ec}
BENCH=${BENCH:-/tmp/bench}
mkdir -p "$OUT" "$CACHE" "$BENCH"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
pytest_() { "$PY" -m pytest -p no:cacheprovider --engine-cache "$CACHE" --benchmark-storage "file://$BENCH" "$@"; }
# The whole suite-gpu.toml (engines torch, onnxruntime, inductor) in ONE pytest command, as the nightly gate runs it
# (night, build, nights): tier_night STORAGE LOG [pytest options]. NIGHT_TIMEOUT (s): SIGTERM then, inside a device
# call's 10 minutes; the run ends with its summary, verdict and results marked incomplete, and the engines built so
# far stay in the cache for the next part.
tier_night() {
  local storage=$1 log=$2
  shift 2
  timeout -s TERM "${NIGHT_TIMEOUT:-0}" "$PY" -m pytest -p no:cacheprovider --engine-cache "$CACHE" \
    --benchmark-storage "file://$storage" -n auto --device cuda --suite-config suite-gpu.toml \
    --engines torch,onnxruntime,inductor tests/accuracy tests/parity tests/latency/test_latency.py -q -rfE \
    "$@" > "$log" 2>&1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# the host's cores and their hyperthread siblings: how the workers' CPU shares fall (suite/fleet/workers.py cpu_share)
{ lscpu; lscpu -p=CPU,CORE,SOCKET; } > "$OUT/cpu.txt" 2>&1
# nights: one whole-tier night per entry of NIGHTS, each gated against the nights kept before it (see the top)
nights_part() {
  local state=${NIGHTS_STATE:-/tmp/nights} k=${NIGHTS_K:-5} min_runs=2 entry gpus tag var night label stage work
  local kept=${KEPT:-$state/kept} entries=() extra=() base=() saved=() kept_runs accuracy latency start wall code why
  local smi failed=0 path
  read -ra entries <<< "${NIGHTS:?NIGHTS: one GPU count per night, e.g. NIGHTS=\"1 2 2 1\" or \"1 2 1:inject\"}"
  for entry in "${entries[@]}"; do  # every entry checked before the first night starts
    [[ $entry =~ ^[1-9][0-9]*(:[A-Za-z0-9_]+)?$ ]] || { echo "nights: bad entry '$entry' (N or N:TAG)"; return 2; }
    if [[ $entry == *:* ]]; then
      var=NIGHT_EXTRA_${entry#*:}
      [ -n "${!var:-}" ] || { echo "nights: $entry: set $var to the pytest options of that night"; return 2; }
    fi
  done
  if [ "${#entries[@]}" -gt 3 ]; then
    echo "nights: ${#entries[@]} nights write $(( 2 * ${#entries[@]} + 1 )) files; a device call brings back 8"
  fi
  mkdir -p "$kept/benchmarks" "$state/runs" "$BENCH/nights-work"
  stage=$(mktemp -d)
  mv "$OUT/gpu.txt" "$OUT/cpu.txt" "$stage/"  # into each night's tar: a device call brings back 8 files
  for entry in "${entries[@]}"; do
    gpus=${entry%%:*} tag="" extra=()
    if [[ $entry == *:* ]]; then
      tag=${entry#*:} var=NIGHT_EXTRA_${entry#*:}
      read -ra extra <<< "${!var}"
    fi
    night=$(( $(cat "$state/counter" 2>/dev/null || echo 0) + 1 ))
    echo "$night" > "$state/counter"
    label=n$night
    work=$BENCH/nights-work/$label
    rm -rf "$work" && mkdir -p "$work/benchmarks"
    cp -a "$kept/benchmarks/." "$work/benchmarks/"  # tonight works on a copy; only a kept night writes $kept
    # the workflow's baselines step: the saved runs last:K finds, resolved as the gate resolves it
    kept_runs=$("$PY" - "$kept/benchmarks" "$k" <<'PYEOF'
import sys
from pathlib import Path

from suite.gate.baselines import BaselineError, resolve_latency_baselines

try:
    print(len(resolve_latency_baselines(f"last:{sys.argv[2]}", Path(sys.argv[1]))))
except BaselineError:
    print(0)
PYEOF
    ) || kept_runs=0
    base=() latency=none accuracy=none
    if [ "$kept_runs" -ge "$min_runs" ]; then latency=last:$kept_runs; base+=(--latency-baseline="$latency"); fi
    if [ -s "$kept/results.json" ]; then accuracy=$kept/results.json; base+=(--accuracy-baseline="$accuracy"); fi
    {
      echo "night $label: $gpus GPU(s) (CUDA_VISIBLE_DEVICES=$(seq -s, 0 $(( gpus - 1 ))))${tag:+, $tag: ${extra[*]}}"
      echo "kept nights before it: $kept_runs of last:$k; latency baseline: $latency; accuracy baseline: $accuracy"
    } | tee "$stage/$label-notes.txt"
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 1000 > "$stage/$label-smi.csv" &
    smi=$!
    touch "$work/started"  # the saved run newer than this is tonight's
    start=$(date +%s)
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $(( gpus - 1 ))) tier_night "$work/benchmarks" "$stage/$label.log" \
      --benchmark-save nightly --benchmark-json "$stage/$label-benchmark.json" "${base[@]}" \
      --accept-not-judged=unsupported,no-data,inconclusive,no-baseline --suite-results "$stage/$label.json" \
      "${extra[@]}" "${EXTRA[@]}"
    code=$?
    wall=$(( $(date +%s) - start ))
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    # the workflow's promote step: only a passing night whose results and saved run are complete is kept
    why=$("$PY" - "$work" "$stage/$label.json" "$code" "$tag" <<'PYEOF'
import json
import sys
from pathlib import Path

from suite.results import incompleteness

work, results, code, tag = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
started = (work / "started").stat().st_mtime
saved = sorted(p for p in (work / "benchmarks").glob("*/[0-9][0-9][0-9][0-9]_*.json") if p.stat().st_mtime >= started)
why = ""
if tag:
    why = f"a night tagged {tag} is never kept"
elif code != "0":
    why = f"the run did not pass (exit {code})"
elif not results.is_file() or not saved:
    why = "the run wrote no results.json or no saved benchmark run"
else:
    for path in [results, *saved]:
        incomplete = incompleteness(json.loads(path.read_text()))
        if incomplete:
            why = f"{path.name} is incomplete ({incomplete})"
print(why or "kept " + " ".join(str(p.relative_to(work / "benchmarks")) for p in saved))
PYEOF
    ) || why="the keep check failed"
    if [[ $why == kept\ * ]]; then
      read -ra saved <<< "${why#kept }"
      for path in "${saved[@]}"; do
        mkdir -p "$kept/benchmarks/$(dirname "$path")"
        cp -p "$work/benchmarks/$path" "$kept/benchmarks/$path"
      done
      cp -p "$stage/$label.json" "$kept/.results.json.tmp" && mv "$kept/.results.json.tmp" "$kept/results.json"
      why="kept: ${why#kept }"
    else
      why="not kept: $why"
    fi
    if [ "$code" -ne 0 ] && [ -z "$tag" ]; then failed=1; fi  # a tagged night may fail by design
    grep -v "^test_latency\|^---\|^Name \|^$" "$stage/$label.log" | tail -45
    echo "== $label: pytest exit $code in $wall s; $why" | tee -a "$stage/$label-notes.txt"
    [ -s "$state/history.tsv" ] || printf 'night\tgpus\ttag\tlatency\taccuracy\texit\twall_s\tkept\n' > "$state/history.tsv"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$gpus" "${tag:--}" "$latency" "$accuracy" "$code" "$wall" \
      "$why" >> "$state/history.tsv"
    for f in "$label.json" "$label-benchmark.json"; do [ -f "$stage/$f" ] && cp -p "$stage/$f" "$state/runs/"; done
    tail -n 60 "$stage/$label.log" > "$OUT/$label.tail.txt"
    cp -p "$state/history.tsv" "$stage/"
    (cd "$stage" && tar czf "$OUT/.$label.tar.gz" ./*) && mv "$OUT/.$label.tar.gz" "$OUT/$label.tar.gz"
    rm -f "$stage/$label"* && rm -rf "$work"
  done
  # every night so far, this call's and earlier calls': the table docs/nightly.md holds
  local runs=()
  mapfile -t runs < <(find "$state/runs" -name 'n*.json' ! -name '*-benchmark.json' | sort -V)
  [ "${#runs[@]}" -eq 0 ] || "$PY" tools/night_table.py "${runs[@]}" | tee "$OUT/nights.md"
  rm -rf "$stage"
  return "$failed"
}

status=0
case "$PART" in
  tier)
    pytest_ -n auto --device cuda --suite-config suite-gpu.toml --models resnet50 --engines torch,onnxruntime,inductor \
      tests/accuracy tests/parity tests/latency/test_latency.py --benchmark-save tier \
      --suite-results "$OUT/tier.json" --html "$OUT/report.html" --self-contained-html -q "${EXTRA[@]}" 2>&1 \
      | tee "$OUT/tier.log" || status=$?
    ;;
  study)
    "$PY" tools/bound_study.py --device cuda:0 --engine-cache "$CACHE" --processes 5 --hog-processes 2 \
      --json "$OUT/study.json" 2>&1 | tee "$OUT/study.md" || status=$?
    ;;
  rebuild)
    pytest_ --device cuda:0 --suite-config suite-gpu.toml --models resnet50 --engines onnxruntime,inductor \
      --precisions fp32,fp16 tests/parity/test_rebuild.py --rebuild-check 2 --suite-results "$OUT/rebuild.json" \
      -q "${EXTRA[@]}" 2>&1 | tee "$OUT/rebuild.log" || status=$?
    ;;
  shapes)
    pytest_ --device cuda:0 --suite-config suite-gpu.toml --models resnet50,resnet50_static --engines onnxruntime \
      --precisions fp16 tests/latency/test_latency.py --latency-paths model --latency-rounds 100 \
      --suite-results "$OUT/shapes.json" -q "${EXTRA[@]}" 2>&1 | tee "$OUT/shapes.log" || status=$?
    ;;
  minilm)
    pytest_ --device cuda:0 --suite-config suite-gpu.toml --models minilm_l6,minilm_l6_fused tests/parity \
      --engines torch,onnxruntime,inductor \
      tests/latency --overhead-model minilm_l6 --latency-rounds 20 --suite-results "$OUT/minilm.json" \
      --html "$OUT/minilm.html" --self-contained-html -q "${EXTRA[@]}" 2>&1 | tee "$OUT/minilm.log" || status=$?
    ;;
  bisect)
    { grep -m1 "model name" /proc/cpuinfo; grep -o -w -m1 "avx512_vnni\|avx_vnni\|amx_int8" /proc/cpuinfo | sort -u
      "$PY" -c "import onnxruntime as o; print('onnxruntime', o.__version__)"; } | tee "$OUT/bisect-cpu.txt"
    "$PY" tools/localize.py --model efficientnet_lite0 --engine onnxruntime --precision int8 --device cpu \
      --engine-cache "$CACHE" --bisect always --json "$OUT/bisect.json" \
      "${EXTRA[@]}" 2>&1 | tee "$OUT/bisect.log" || status=$?
    ;;
  refusal)
    pytest_ --device cuda:0 --suite-config suite-gpu.toml --models resnet18 --precisions fp16 -m "accuracy or parity" \
      tests/parity/test_parity.py -q "${EXTRA[@]}" > "$OUT/refusal.log" 2>&1
    refused=$?
    tail -25 "$OUT/refusal.log"
    # the part succeeds when the run refused (non-zero) and named TensorRT; a green run here is the defect
    if [ "$refused" -ne 0 ] && grep -q "tensorrt" "$OUT/refusal.log"; then status=0; else status=1; fi
    echo "refusal: pytest exit $refused"
    ;;
  localize)
    { echo '[run]'; echo 'requires = ["torch", "onnxruntime"]'
      for model in overflow_mlp layernorm_overflow; do printf '%s\n' "" "[models.$model]" \
        "factory = \"tests.selftest.overflow_models:$model\"" \
        'inputs = [{ name = "x", shape = [16], dtype = "float32", low = -1.0, high = 1.0 }]' \
        'outputs = ["logits"]' 'batch_sizes = [1, 8]' 'precisions = ["fp32", "fp16"]' \
        'engines = ["torch", "onnxruntime"]'; done; } > "$OUT/overflow.toml"
    pytest_ --device "${DEVICE:-cuda:0}" --suite-config "$OUT/overflow.toml" tests/parity/test_parity.py -k uniform --localize \
      --suite-results "$OUT/localize.json" -q "${EXTRA[@]}" 2>&1 | tee "$OUT/localize.log"
    status=${PIPESTATUS[0]}
    for cell in "overflow_mlp fp16" "layernorm_overflow fp16" "overflow_mlp fp32"; do
      set -- $cell
      "$PY" tools/localize.py --suite-config "$OUT/overflow.toml" --engine-cache "$CACHE" --device "${DEVICE:-cuda:0}" \
        --model "$1" --engine onnxruntime --precision "$2" --generated uniform --batch 8 --bisect always \
        --json "$OUT/localize-$1-$2.json" 2>&1 | tee "$OUT/localize-$1-$2.log"
    done
    "$PY" tools/localize.py --engine-cache "$CACHE" --device "${DEVICE:-cuda:0}" --model efficientnet_lite0 --engine onnxruntime \
      --precision int8 --bisect always --json "$OUT/localize-efficientnet-int8.json" 2>&1 \
      | tee "$OUT/localize-efficientnet-int8.log"
    "$PY" tools/localize.py --suite-config suite-gpu.toml --engine-cache "$CACHE" --device "${DEVICE:-cuda:0}" --model resnet18 --engine onnxruntime \
      --precision fp16 --bisect always --json "$OUT/localize-resnet18-fp16.json" 2>&1 \
      | tee "$OUT/localize-resnet18-fp16.log"
    ;;
  localize-minilm)
    for cell in "minilm_l6_fused fp16" "minilm_l6_fused fp32" "minilm_l6 fp16" "minilm_l6 bf16"; do
      set -- $cell
      "$PY" tools/localize.py --suite-config suite-gpu.toml --engine-cache "$CACHE" --device "${DEVICE:-cuda:0}" \
        --model "$1" --engine onnxruntime --precision "$2" --bisect always --json "$OUT/localize-$1-$2.json" 2>&1 \
        | tee "$OUT/localize-$1-$2.log"
      status=$(( status | PIPESTATUS[0] ))
    done
    ;;
  build)
    LABEL=${LABEL:-build} bash "$0" night -k test_parity_at_every_engine_batch "${EXTRA[@]}" || status=$?
    ;;
  night)
    LABEL=${LABEL:-night}
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 1000 > "$OUT/$LABEL-smi.csv" &
    smi=$!
    start=$(date +%s)
    tier_night "$BENCH" "$OUT/$LABEL.log" --accept-not-judged unsupported,no-data,no-baseline \
      --suite-results "$OUT/$LABEL.json" "${EXTRA[@]}"
    status=$?
    kill "$smi" 2>/dev/null
    grep -v "^test_latency\|^---\|^Name \|^$" "$OUT/$LABEL.log" | tail -45
    echo "== $LABEL: pytest exit $status in $(( $(date +%s) - start )) s; nvidia-smi peak MiB per GPU:"
    sort -t, -k1,1n -k2,2n "$OUT/$LABEL-smi.csv" | awk -F', *' '{p[$1]=($2>p[$1]?$2:p[$1])} END {for (g in p) print "  GPU " g ": " p[g]}'
    ;;
  nights)
    nights_part || status=$?
    ;;
  kernelcal)
    for batch in ${CAL_BATCHES:-32 1}; do
      "$PY" tools/gate_calibration.py --device cuda:0 --suite-config suite-gpu.toml --model resnet50 --engine torch \
        --precision fp16 --path graph --batch "$batch" --rounds 500 --runs 4 --workers "${CAL_WORKERS:-10}" \
        --threshold 0.02 --slowdown 0.02 --baseline-runs 1,3,5 --inject-kernel --engine-cache "$CACHE" \
        --json "$OUT/kernel2pct-bs$batch.json" "${EXTRA[@]}" 2>&1 | tee "$OUT/kernel2pct-bs$batch.md"
      status=$(( status | PIPESTATUS[0] ))
    done
    ;;
  contention)
    # One model's cells, each run a process of its own on one GPU: a cold build, then alone on GPU 0 and on GPU 0
    # and GPU 1 at once, in turn. Does the other GPU's process slow this one's tests? (The two-GPU night's
    # test work grew 17-19 % on an H200 pair, mostly in ONNX Runtime's first runs: docs/gpu.md.) Compare the
    # processes' run.test_times. CONTENTION_MODEL (mobilenet_v2), CONTENTION_ENGINES (onnxruntime), and the extra
    # options (e.g. --precisions fp16) narrow it.
    one() { CUDA_VISIBLE_DEVICES=$1 pytest_ --device cuda:0 --suite-config suite-gpu.toml \
      --models "${CONTENTION_MODEL:-mobilenet_v2}" --engines "${CONTENTION_ENGINES:-onnxruntime}" \
      --accept-not-judged unsupported,no-data,no-baseline tests/accuracy tests/parity \
      --suite-results "$OUT/contention-$2.json" -q "${EXTRA[@]}" > "$OUT/contention-$2.log" 2>&1; }
    one 0 cold || status=$?
    # alone and paired in turn, CONTENTION_REPEATS times: the host drifts between runs (the first probe's same
    # process alone moved +39 % between two runs), so one of each cannot tell contention from drift
    for i in $(seq 1 "${CONTENTION_REPEATS:-3}"); do
      one 0 "alone$i" || status=$?
      one 0 "pair$i-gpu0" & first=$!
      one 1 "pair$i-gpu1" & second=$!
      wait $first || status=$?
      wait $second || status=$?
    done
    "$PY" - "$OUT" <<'PYEOF'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("contention-*.json")):
    run = json.loads(f.read_text())["run"]
    print(f"{f.stem}: test seconds {sum(r[4] for r in run['test_times']):.1f}, wall {run['wall_s']} s")
PYEOF
    # one file: a device call brings back at most 8 (the first try lost pair1's)
    (cd "$OUT" && rm -f contention-*.partial.jsonl && tar czf contention.tgz contention-*.json contention-*.log \
      && rm -f contention-*.json contention-*.log)
    ;;
  firstcall)
    "$PY" tools/first_call_probe.py --suite-config suite-gpu.toml --engine-cache "$CACHE" --device cuda:0 \
      --models "${FIRSTCALL_MODELS:-efficientnet_lite0,mobilenet_v2,resnet50}" --profile --json "$OUT/firstcall.json" \
      "${EXTRA[@]}" 2>&1 | tee "$OUT/firstcall.md"
    status=${PIPESTATUS[0]}
    ;;
  explain)
    # A real change of the engine, not an injected one: ResNet-50 torch fp16 latency (batch 32, every path) with
    # --kernel-profile as the baseline, then the same with channels_last = false (NCHW activations: cuDNN runs other
    # kernels) gated against it: the report says what moved, the kernels behind it and the SM clocks. HTML=1 writes
    # the report too (pytest-html installed).
    sed 's/^channels_last = true .*/channels_last = false/' suite-gpu.toml > suite-gpu-nchw.toml
    common=(--device cuda:0 --models resnet50 --engines torch --precisions fp16 --latency-batch-sizes 32
            --kernel-profile 10 tests/latency/test_latency.py tests/parity/test_parity.py
            -k "test_latency or on_dataset" -q -rfE)  # the parity check: a baseline run must judge something
    pytest_ --suite-config suite-gpu.toml "${common[@]}" --accept-not-judged unsupported,no-data,no-baseline \
      --benchmark-save nhwc --suite-results "$OUT/nhwc.json" "${EXTRA[@]}" > "$OUT/nhwc.log" 2>&1
    status=$?
    pytest_ --suite-config suite-gpu-nchw.toml "${common[@]}" --accept-not-judged unsupported,no-data \
      --latency-baseline last:1 --accuracy-baseline "$OUT/nhwc.json" --suite-results "$OUT/nchw.json" \
      ${HTML:+--html "$OUT/nchw.html" --self-contained-html} "${EXTRA[@]}" > "$OUT/nchw.log" 2>&1
    echo "== explain: baseline exit $status, channels_last=false exit $?"
    grep -v "^test_latency\|^$" "$OUT/nchw.log" | tail -40
    rm -f suite-gpu-nchw.toml
    ;;
  *) echo "unknown part $PART"; exit 2 ;;
esac
echo "== $PART exit $status"
exit "$status"
