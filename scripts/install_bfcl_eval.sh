#!/usr/bin/env bash
# Install the OFFICIAL BFCL AST checker (bfcl-eval) into its own venv, outside the repo (paper App. B:
# BFCL validity = the bfcl-eval AST checker). vrr calls it through vrr/loop/tasks/bfcl_worker.py.
#
# Usage: bash scripts/install_bfcl_eval.sh [VENV]      (default ~/.cache/vrr/venv-bfcl-eval)
# Then vrr finds it there, or set VRR_BFCL_PYTHON=VENV/bin/python.
# Idempotent: a complete venv is only re-checked.
#
# Why --no-deps: bfcl-eval 2026.3.23 pins numpy==1.26.4 and pulls every provider SDK (openai, anthropic,
# mistralai, cohere, google-genai, qwen-agent, writer-sdk, boto3), sentence-transformers, faiss-cpu,
# pandas, huggingface_hub, datamodel-code-generator, ... (30+ direct requirements). The AST checker and the
# prompting decoder import only these five:
#   tree_sitter==0.21.3, tree-sitter-java==0.21.0, tree-sitter-javascript==0.21.4  (Java/JS call parsers,
#       imported by bfcl_eval.model_handler.utils; pins copied from bfcl-eval's metadata)
#   filelock==3.20.0 (bfcl_eval.utils; pinned likewise), tenacity (bfcl_eval.model_handler.utils)
# and, for the multi-turn executor (bfcl_multi), the one package its eight environments import beyond the
# standard library:
#   mpmath==1.3.0 (MathAPI.logarithm; pinned likewise)
# The one remaining heavy import, bfcl_eval.constants.model_config (it imports every provider handler),
# is replaced by a stub inside the worker; the checker reads it only for `underscore_to_dot`.
set -euo pipefail
VENV="${1:-$HOME/.cache/vrr/venv-bfcl-eval}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
BFCL_VERSION="2026.3.23"   # the wheel ../shared/data/bfcl was copied from
DEPS=("tree_sitter==0.21.3" "tree-sitter-java==0.21.0" "tree-sitter-javascript==0.21.4" "filelock==3.20.0"
      "tenacity==9.2.1" "mpmath==1.3.0")
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

check() {
  "$VENV/bin/python" - "$HERE/vrr/loop/tasks/bfcl_worker.py" <<'PY'
import importlib.metadata as m, json, subprocess, sys
req = {"functions": [{"name": "f", "description": "", "parameters": {"type": "dict",
        "properties": {"x": {"type": "integer", "description": ""}}, "required": ["x"]}}],
       "ground_truth": [{"f": {"x": [1]}}], "output": "f(x=1)", "language": "python"}
out = subprocess.run([sys.executable, sys.argv[1]], input=json.dumps(req) + "\n", capture_output=True,
                     text=True, timeout=120).stdout.splitlines()
assert len(out) == 2 and json.loads(out[1])["valid"] is True, out
# the multi-turn executor's environments (all eight of the multi-turn base category) import
import importlib
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
for cls in ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
            "VehicleControlAPI"):
    getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[cls]), cls)
print("bfcl-eval", m.version("bfcl-eval"), "| python", sys.version.split()[0], "|",
      ", ".join(f"{d} {m.version(d)}" for d in ("tree-sitter", "tree-sitter-java", "tree-sitter-javascript",
                                                  "filelock", "tenacity", "mpmath")),
      "| AST checker and multi-turn environments OK")
PY
}

t0=$(date +%s)
if [ -x "$VENV/bin/python" ] && check 2>/dev/null; then
  echo "[install] $VENV is complete"
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating venv $VENV ($($PY --version))"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "bfcl-eval==$BFCL_VERSION" "${DEPS[@]}"
check
echo "[install] done in $(( $(date +%s) - t0 )) s -> $VENV ($(du -sh "$VENV" | cut -f1))"
