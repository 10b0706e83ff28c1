#!/usr/bin/env bash
# One separate environment for the peer baselines: libpecos needs numpy<2, which our main environment
# does not use. Wheels exist for Python 3.11 for all three. --no-deps keeps libpecos from pulling torch
# (XR-Linear does not need it) and napkinxc from pulling gdown (only its dataset downloader uses it).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x bench/.venv-peers/bin/python ] || python3 -m venv bench/.venv-peers
bench/.venv-peers/bin/python -m pip install -q "numpy<2" "scipy<1.12" "scikit-learn<1.6" typer ruamel.yaml tqdm omikuji==0.5.2
bench/.venv-peers/bin/python -m pip install -q --no-deps libpecos==1.2.8 napkinxc==0.7.2
