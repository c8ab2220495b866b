#!/usr/bin/env bash
# The declared floors, installed and run: a virtualenv with the LOWEST versions pyproject.toml allows for the project's
# direct dependencies and its `transformer` extra (uv's `--resolution lowest-direct`), torch and torchvision held at
# the build setup.sh pins (2.14.1 / 0.29.1: on our machines' disk; a lower torch would pull gigabytes), then a short
# selection of self-tests in it: the MiniLM model (transformers, tokenizers, safetensors at their floors), the
# transformer engines (onnx, onnxruntime, onnxscript at theirs), the start-up check, the verdict, the config.
#
#   bash tools/floor_env.sh                 # venv in /tmp/suite-floor-env (FLOOR_VENV=... to move it)
#   bash tools/floor_env.sh -k minilm       # extra arguments go to pytest
#
# A floor that does not install, or does not work, is raised in pyproject.toml: that is the point of this check.
# What it found (issue 42; Python 3.11, torch 2.14.1):
# - tokenizers >= 0.21 and safetensors >= 0.4 were no real floors: transformers 4.56.0 requires tokenizers >= 0.22
#   and safetensors >= 0.4.3 (its own pins); raised to those.
# - onnxscript 0.5.x has no API for torch >= 2.11 (torch 2.14's dynamo export imports
#   onnxscript._framework_apis.torch_2_11: every dynamo export failed); 0.6.0 is the first that has it: raised.
# - transformers 4.56/4.57's eager BertModel refused the 4-D additive mask minilm_l6_eager gave it ("Wrong shape for
#   input_ids ... or attention_mask": the start-up check stopped a night on 4.57.1); fixtures/models/minilm.py now
#   gives transformers 4 the 0/1 mask, from which it builds that classic mask itself (the fused graph holds Attention).
# - the rest install and pass at their declared floors: numpy 1.26.0, onnx 1.17.0, onnxruntime 1.20.0, pytest 8.0.0,
#   pytest-benchmark 5.0.0, pytest-xdist 3.5.0, hypothesis 6.0.0, transformers 4.56.0.
# Time: about 2.5 minutes on 2 cores (the venv and torch from disk 1, the floors from PyPI 0.3, the tests 1).

set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${FLOOR_VENV:-/tmp/suite-floor-env}
PYTHON=${PYTHON:-python3}
start=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "torch==${TORCH_VERSION:-2.14.1}" "torchvision==${TORCHVISION_VERSION:-0.29.1}" uv
# The lowest versions the declared ranges allow (uv's lowest-direct: each direct dependency at its floor, what they
# pull at its newest), torch and torchvision pinned to setup.sh's. uv resolves from PyPI; it installs nothing here:
# uv installs that list but torch's own (its build lies on our disk, above), without resolving again.
floors="$VENV/floors.txt"
"$VENV/bin/uv" pip compile -q --no-header --no-annotate --python "$VENV/bin/python" --resolution lowest-direct \
  --extra transformer -P "torch==${TORCH_VERSION:-2.14.1}" -P "torchvision==${TORCHVISION_VERSION:-0.29.1}" \
  pyproject.toml -o "$floors"
grep -vE '^(torch|torchvision|triton|nvidia-[a-z0-9-]+)==' "$floors" > "$VENV/floors-but-torch.txt"
uv=("$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps)
"${uv[@]}" -r "$VENV/floors-but-torch.txt"
"${uv[@]}" -e .
"$VENV/bin/python" -c "from suite.sigterm import install_pth; install_pth()"  # SIGTERM held from start-up (suite/sigterm.py)
echo "== installed in $(( $(date +%s) - start )) s"
echo "== the floors installed"
"$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -iE '^(numpy|torch|torchvision|onnx|onnxscript|onnxruntime|pytest|pytest-benchmark|pytest-xdist|hypothesis|transformers|tokenizers|safetensors) '
echo "== the self-tests at the floors"
status=0
# Not test_golden.py: its text is setup.sh's versions' (floors: 7 ONNX nodes for 5, pytest-html 4.0's other words).
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 0 \
  tests/selftest/test_minilm.py tests/selftest/test_transformer_engines.py tests/selftest/test_preflight.py \
  tests/selftest/test_verdict.py "$@" || status=$?
echo "== floor check took $(( $(date +%s) - start )) s"
exit "$status"
