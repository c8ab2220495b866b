#!/usr/bin/env bash
# The GPU tier in one command, for a CUDA machine whose Python already has the suite's packages
# (see docs/gpu.md). Writes the log, the suite's JSON records, pytest-benchmark's JSON and the HTML
# report under RESULTS (default: gpu-results/). Extra arguments go to pytest.
#   bash tools/gpu_tier.sh --models resnet50 --latency-batch-sizes 1,32,256
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-gpu-results}
PYTHON=${PYTHON:-python3}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1
"$PYTHON" -m pytest -p no:cacheprovider --device "${DEVICE:-cuda:0}" --suite-config "${SUITE_CONFIG:-suite-gpu.toml}" \
  --engine-cache "${ENGINE_CACHE:-.engine-cache}" --suite-results "$RESULTS/results.json" \
  --benchmark-json "$RESULTS/benchmark.json" -rs "$@" 2>&1 | tee "$RESULTS/log.txt"
exit "${PIPESTATUS[0]}"
