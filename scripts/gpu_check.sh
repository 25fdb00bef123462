#!/usr/bin/env bash
# The GPU check in one command (docs/gpu.md): kernels, parity, graphs, overlap, memory,
# sleep and speed, each group time-boxed, each writing one JSON into the output folder, a
# failure in one never stopping the rest; summary.json and a table at the end.
#
#   scripts/gpu_check.sh                 # on the GPU machine: OUT=$OUT, wheels from .whl/
#   scripts/gpu_check.sh --dry-run       # here: every CUDA step replaced by its CPU twin
#   scripts/gpu_check.sh --only parity,speed --out /tmp/x
#
# Time boxes (seconds, on an H100/H200) are estimates from the shapes; they sum to 465 s
# (7.8 min), so a rerun fits a 15-minute lease. docs/gpu.md has the per-group reasoning.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0
ONLY=""
OUT_DIR="${OUT:-/tmp/gpu_check_out}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --only) ONLY="$2"; shift ;;
    --out) OUT_DIR="$2"; shift ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# group:time box on the GPU (GPU_CHECK_BOXES replaces the list: the dry-run test uses it)
BOXES="${GPU_CHECK_BOXES:-kernels:150 parity:75 graphs:35 overlap:35 memory:40 sleep:30 speed:100}"
PY="${PYTHON:-python3}"
if [ "$DRY" = 1 ]; then
  [ -x .venv/bin/python ] && PY="${PYTHON:-.venv/bin/python}"
  export TRITON_INTERPRET=1
  FLAG="--dry-run"
else
  FLAG=""
  WHEELS="${GPU_CHECK_WHEELS:-.whl}"  # ../shared/device/wheels.sh fills .whl/
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    SITE=/tmp/gpu_check_site
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$WHEELS"/*.whl || { echo "gpu_check: wheel install failed" >&2; exit 3; }
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"
LOGS="$(mktemp -d /tmp/gpu_check_logs.XXXX)"
export GPU_CHECK_WORK="$(mktemp -d /tmp/gpu_check_work.XXXX)"
[ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv 2>&1 | head -3

for entry in $BOXES; do
  group="${entry%%:*}"
  box="${entry##*:}"
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$group,"* ]]; then continue; fi
  [ "$DRY" = 1 ] && box=$((box * 2))  # CPU twins: tiny shapes, but a slower, shared host
  echo "== $group (time box ${box} s)"
  start=$(date +%s.%N)
  timeout -k 5 "$box" "$PY" -m benchmarks.gpu_check.main "$group" --out "$OUT_DIR" \
    --budget "$box" $FLAG > >(tee "$LOGS/$group.log") 2>&1
  rc=$?
  wait
  echo "$rc" > "$LOGS/$group.rc"
  echo "$box" > "$LOGS/$group.box"
  awk "BEGIN { print $(date +%s.%N) - $start }" > "$LOGS/$group.secs"
done
echo "0" > "$LOGS/tp.rc"; echo 0 > "$LOGS/tp.box"; echo 0 > "$LOGS/tp.secs"
"$PY" -m benchmarks.gpu_check.summary "$OUT_DIR" "$LOGS"
