#!/usr/bin/env bash
# Rewrite requirements/constraints.txt, the versions scripts/setup.sh installs.
#
#   scripts/refresh-constraints.sh          resolve the newest versions today: build a fresh, unpinned
#                                           environment with scripts/setup.sh in a temporary folder, freeze it
#   scripts/refresh-constraints.sh VENV     freeze the environment VENV you have already tested
#
# Then run the test suite in an environment set up from the new file, and commit it.
# Left out: torch, which TORCH_SPEC in scripts/setup.sh pins (a GPU build brings its own CUDA
# packages, left out too), and this package itself. Local version labels (+cpu) are dropped: the
# file must read the same on macOS, where no such build exists. INTEL_MAC_GAPS: pins released with no
# wheel for Intel Macs (seen with `pip install --dry-run --no-deps --prefer-binary --platform
# macosx_14_0_x86_64 ... -r requirements/constraints.txt`); they apply elsewhere only, and an Intel Mac
# takes the newest release that has a wheel (setup.sh installs --prefer-binary).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=requirements/constraints.txt
NOT_PINNED='^(torch|triton|nvidia-[^=]*|cuda-[^=]*)=='
INTEL_MAC_GAPS='faiss-cpu|cryptography'
NOT_INTEL_MAC='sys_platform != "darwin" or platform_machine != "x86_64"'

if [ $# -gt 0 ]; then
  VENV=$1
else
  SCRATCH=$(mktemp -d); trap 'rm -rf "$SCRATCH"' EXIT
  VENV=$SCRATCH/venv
  VENV=$VENV CONSTRAINTS=/dev/null scripts/setup.sh >&2
fi
PY=$VENV/bin/python
{
  echo "# Made by scripts/refresh-constraints.sh on $(date -u +%F) from Python $("$PY" -c 'import platform; print(platform.python_version(), platform.system(), platform.machine())')."
  echo "# scripts/setup.sh installs with 'pip install -c' this file; torch is TORCH_SPEC's."
  "$PY" -m pip freeze --all --exclude-editable | grep -Eiv "$NOT_PINNED" | sed -E 's/\+[^[:space:];]+//' |
    sed -E "s/^(($INTEL_MAC_GAPS)==.*)$/\1; $NOT_INTEL_MAC/"
} > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT ($(grep -vc '^#' "$OUT") pins)" >&2
