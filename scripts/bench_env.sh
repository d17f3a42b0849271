#!/usr/bin/env bash
# `make env` run twice in one run into a temporary folder, once as the Makefile has it (uv) and once with pip as
# PIP_INSTALL; prints both wall times, their ratio, and whether the two resolved the same package versions.
# Usage: bash scripts/bench_env.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

seconds() {  # seconds <command...>: the wall time of the command, its output discarded
  local start; start=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  python3 -c "print($(date +%s.%N) - $start)"
}

uv_s=$(seconds make -C "$repo" env VENV="$tmp/uv")
pip_s=$(seconds make -C "$repo" env VENV="$tmp/pip" PIP_INSTALL="$tmp/pip/bin/python -m pip install")
versions() { "$tmp/uv/bin/python" -m uv pip freeze --python "$tmp/$1/bin/python" 2>/dev/null \
  | grep -v -E '^(-e |pip==|uv==|setuptools==)' | tr 'A-Z_' 'a-z-' | sort; }
same=$([ "$(versions pip)" = "$(versions uv)" ] && echo "same" || echo "DIFFERENT")
PYTHONPATH="$repo" "$tmp/uv/bin/python" -c "import os; from vrr.loop.engine.backend import cpu_kind; \
print(f'machine: {cpu_kind()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the end')"
printf 'commit: %s\n' "$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf 'make env with pip: %.0f s   with uv (the Makefile): %.0f s   ratio %.1fx   package versions: %s\n' \
  "$pip_s" "$uv_s" "$(python3 -c "print($pip_s / $uv_s)")" "$same"
