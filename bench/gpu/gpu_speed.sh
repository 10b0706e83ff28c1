#!/bin/bash
# The GPU speed measurements of one device loan, in one call (device time is short, and each start costs
# minutes): embedding (bench/embed_speed.py) and training (bench/train_speed.py) at LF-AmazonTitles-131K's
# preset, MiniLM and DistilBERT-sized, plain and under torch.compile. Run from the repository root on an
# offline GPU machine prepared as bench/gpu/offline_env.sh says (.whl/ with ruamel.yaml, .carry/minilm/):
#
#   OUT=/some/folder bash bench/gpu/gpu_speed.sh
#
# Results are appended to $OUT/embed_speed.json and $OUT/train_speed.json as each one finishes, so a run
# cut short keeps what it measured; merge them into bench/results/ afterwards.
set -u
. bench/gpu/offline_env.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
step() { echo "== $(date +%T) $*"; "$@" 2>&1 | tr '\r' '\n' | grep -v -e '^Loading weights' -e '^embed labels' -e '^\s*$' | tail -n 12; }

E="python bench/embed_speed.py --out $OUT/embed_speed.json"
T="python bench/train_speed.py --preset LF-AmazonTitles-131K --out $OUT/train_speed.json"
step $E --model all-MiniLM-L6-v2 --batch-sizes 256,1024,4096
step $E --model all-MiniLM-L6-v2 --min-tokens 8 --batch-sizes 256,1024
step $T --model all-MiniLM-L6-v2
step $T --model distilbert-sized
step $E --model distilbert-sized --batch-sizes 256,1024
step $E --model all-MiniLM-L6-v2 --texts 1305265 --batch-sizes 1024 --forward-seconds 0
step $T --model distilbert-sized --compile
step $T --model all-MiniLM-L6-v2 --compile
echo "== $(date +%T) done"
