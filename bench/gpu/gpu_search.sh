#!/bin/bash
# Evaluate's exact search on one GPU at the LF-AmazonTitles-1.3M shape (bench/gpu_search.py), in one device call:
# fp16 products rescored in fp32 (what tune and evaluate run on a GPU) over all 970,237 test queries, then fp32
# products on a share of them for comparison, each checked against the CPU's ExactIndex on 256 queries; then the
# GPU tests where pytest is importable. Needs only torch, numpy, typer and tqdm (no offline_env.sh). From the
# repository root:
#
#   OUT=/some/folder bash bench/gpu/gpu_search.sh
#
# Each run appends a row to $OUT/gpu_search.json as it finishes; merge them into bench/results/gpu_search.json.
set -u
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
echo "== $(date +%T) fp16 rescored, every test query"
timeout 300 python bench/gpu_search.py --out "$OUT/gpu_search.json" --max-seconds 240 2>&1 | tail -n 60
echo "== $(date +%T) fp32 products, 100,000 queries"
timeout 150 python bench/gpu_search.py --out "$OUT/gpu_search.json" --no-half --queries 100000 --max-seconds 90 \
  2>&1 | grep -E 'queries_per_s|search_s|merge_s|mismatch|recall'
if python -c "import pytest" 2>/dev/null; then
  echo "== $(date +%T) GPU tests"
  timeout 120 python -m pytest -p no:cacheprovider -o addopts="" -q tests/memory/test_torch_index.py 2>&1 | tail -n 5
fi
echo "== $(date +%T) done"
