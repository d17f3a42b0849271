#!/usr/bin/env bash
# The analysis venv (`make env`'s .venv) built twice in one run into a temporary folder, once with pip and
# once with uv (the Makefile's PIP_INSTALL), with the same extras; prints both wall times, their ratio, and
# whether the two resolved the same package versions. Usage: bash scripts/bench_env.sh [python]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
extras="$repo[notebooks,test,tasks,dspy,inspect]"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

build() {  # build <name> <install command...>: a fresh venv, then the install; prints the seconds
  local venv="$tmp/$1"; shift
  local start end
  start=$(date +%s.%N)
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip uv 2>/dev/null
  "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  python3 -c "print($end - $start)"
}

pip_s=$(build pip "$tmp/pip/bin/python" -m pip install -q -e "$extras")
uv_s=$(build uv "$tmp/uv/bin/python" -m uv pip install -q --compile-bytecode --python "$tmp/uv/bin/python" -e "$extras")
versions() { "$tmp/$1/bin/python" -m uv pip freeze --python "$tmp/$1/bin/python" 2>/dev/null | grep -v -E '^(-e |pip==|uv==|setuptools==)' \
  | tr 'A-Z_' 'a-z-' | sort; }
same=$([ "$(versions pip)" = "$(versions uv)" ] && echo "same" || echo "DIFFERENT")
printf 'machine: %s, %s cores (%s)\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" \
  "$(grep -o -E -m1 'amx_bf16|avx512_bf16' /proc/cpuinfo || echo 'no bf16')"
printf 'commit: %s\n' "$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf 'pip: %.0f s   uv --compile-bytecode: %.0f s   ratio %.1fx   package versions: %s\n' \
  "$pip_s" "$uv_s" "$(python3 -c "print($pip_s / $uv_s)")" "$same"
