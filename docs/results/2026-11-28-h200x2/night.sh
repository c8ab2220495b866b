#!/usr/bin/env bash
# One night of a gated sequence (issue 42), as the nightly workflow runs it: NAME GPUS [extra pytest options]
set -uo pipefail
NAME=$1; GPUS=$2; shift 2
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))")/nvidia
export LD_LIBRARY_PATH=$(ls -d "$nv"/*/lib "$nv"/cu13/lib 2>/dev/null | tr '\n' ':')${LD_LIBRARY_PATH:-}
KEPT=/tmp/kept; mkdir -p $KEPT/benchmarks
O=/tmp/nights/$NAME; rm -rf $O /tmp/work-$NAME; mkdir -p $O /tmp/work-$NAME
cp -a $KEPT/benchmarks /tmp/work-$NAME/
k=$(find $KEPT/benchmarks -name '[0-9][0-9][0-9][0-9]_*.json' | wc -l)
args=()
if [ "$k" -ge 1 ]; then args+=(--latency-baseline=last:$(( k < 5 ? k : 5 ))); fi
if [ -s $KEPT/results.json ]; then args+=(--accuracy-baseline=$KEPT/results.json); fi
if [ "$GPUS" = 1 ]; then export CUDA_VISIBLE_DEVICES=0; else export CUDA_VISIBLE_DEVICES=0,1; fi
echo "$NAME: GPUs $CUDA_VISIBLE_DEVICES, kept $k, args ${args[*]} $*" | tee $O/summary.txt
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 1000 > $O/smi.csv &
smi=$!
start=$(date +%s.%N)
timeout -s TERM "${NIGHT_TIMEOUT:-560}" python3 -m pytest tests/accuracy tests/parity tests/latency -p no:cacheprovider \
  -n auto --device=cuda --suite-config=suite-gpu.toml --engines torch,onnxruntime,inductor --engine-cache=/tmp/ec \
  --benchmark-storage=file:///tmp/work-$NAME/benchmarks --benchmark-save=nightly --benchmark-json=$O/benchmark.json \
  "${args[@]}" --accept-not-judged=unsupported,no-data,inconclusive,no-baseline \
  --suite-results=$O/results.json --html=$O/report.html --self-contained-html -q -rfE "$@" > $O/log.txt 2>&1
status=$?
end=$(date +%s.%N)
kill $smi 2>/dev/null
echo "$NAME: pytest exit $status in $(python3 -c "print(round($end-$start,1))") s" | tee -a $O/summary.txt
if [ "$status" = 0 ] && [ -z "${NO_KEEP:-}" ]; then
  new=$(cd /tmp/work-$NAME/benchmarks && find . -name '[0-9][0-9][0-9][0-9]_*.json' | sort | tail -1)
  mkdir -p "$KEPT/benchmarks/$(dirname "$new")" && cp "/tmp/work-$NAME/benchmarks/$new" "$KEPT/benchmarks/$new"
  cp $O/results.json $KEPT/results.json
  echo "$NAME: kept $new" | tee -a $O/summary.txt
fi
python3 - $O/smi.csv <<'PY' | tee -a $O/summary.txt
import sys, collections
peak = collections.defaultdict(int)
for line in open(sys.argv[1]):
    try: i, m = line.split(","); peak[i.strip()] = max(peak[i.strip()], int(m))
    except ValueError: pass
print("nvidia-smi peak MiB:", dict(peak))
PY
grep -v "^test_latency\|^---\|^Name \|^$\|^tests/" $O/log.txt | tail -70 >> $O/summary.txt
tail -45 $O/summary.txt
cp $O/summary.txt "$OUT/$NAME-summary.txt"
tar czf "$OUT/$NAME.tar.gz" -C /tmp/nights "$NAME"
