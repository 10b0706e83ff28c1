#!/usr/bin/env bash
# A separate environment for PECOS (libpecos needs numpy<2, which our main environment does not use).
# --no-deps keeps it from pulling torch (it is not needed for XR-Linear).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x bench/.venv-pecos/bin/python ] || python3 -m venv bench/.venv-pecos
bench/.venv-pecos/bin/python -m pip install -q "numpy<2" "scipy<1.12" "scikit-learn<1.6" typer
bench/.venv-pecos/bin/python -m pip install -q --no-deps libpecos==1.2.8
