#!/bin/bash
# The pipeline's own stages at the synthetic LF-AmazonTitles-131K shape on one GPU, in one device call: MiniLM
# fine-tuned with the paper's 131K preset (batch 896, lr 3e-4, titles of 32 tokens) on a short schedule, then
# embed, index, memory, tune and evaluate, each timed by bench/stage_resources.py. Before them, the two speed
# targets with the library as it is (bench/embed_speed.py, bench/train_speed.py). Run from the repository root
# on an offline GPU machine prepared as bench/gpu/offline_env.sh says (.whl/ with mlflow-skinny and its needs,
# .carry/minilm/, .carry/hnswlib-0.8.0.tar.gz):
#
#   OUT=/some/folder STEPS=600 EF_CONSTRUCTION=100 PIPELINE_S=480 bash bench/gpu/gpu_pipeline.sh
#
# Everything lands in $OUT as it finishes (the stage record after every stage), so a run cut short keeps what
# it measured; SKIP_SPEED=1 leaves the speed targets out. The index is built at EF_CONSTRUCTION (default
# 100, to fit a short loan; the cost model projects the paper's 500).
# The tracked tree with .whl/ and .carry/ comes to just over the 64 MiB a device call carries: move
# bench/results/runs/ and the tracked .npz and .png files out of the working tree for the call (nothing here
# reads them), and put them back after it (`git status` shows them deleted until then).
set -u
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
STEPS=${STEPS:-600}
EF_CONSTRUCTION=${EF_CONSTRUCTION:-100}
NAME=synthetic-LF-AmazonTitles-131K
TAG=minilm-fine-tuned-gpu
. bench/gpu/offline_env.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
python -c "import torch, transformers, hnswlib, gdown, mlflow.store.tracking.sqlalchemy_store; print('torch', torch.__version__, 'transformers', transformers.__version__)" || exit 1

echo "== $(date +%T) speed targets"
if [ -z "${SKIP_SPEED:-}" ]; then
python bench/embed_speed.py --out "$OUT/embed_speed.json" --model all-MiniLM-L6-v2 --batch-sizes 1024 2>&1 | tail -n 3
python bench/train_speed.py --preset LF-AmazonTitles-131K --out "$OUT/train_speed.json" --model all-MiniLM-L6-v2 2>&1 | tail -n 3
fi

echo "== $(date +%T) pipeline"
timeout ${PIPELINE_S:-480} python bench/stage_resources.py --name $NAME --tag $TAG --out "$OUT/stage_resources.json" \
  --stages download,tokenize,train,embed,index,memory,tune,evaluate \
  -S tokenize.input_fields=title -S tokenize.input_max_len=32 -S tokenize.label_max_len=32 \
  -S encoder.mode=fine-tuned -S train.batch_size=896 -S train.lr=3.0e-4 -S train.max_steps=$STEPS \
  -S train.hnm_steps=$((STEPS / 2)) -S train.warmup_steps=$((STEPS / 10)) -S index.ef_construction=$EF_CONSTRUCTION \
  2>&1 | tr '\r' '\n' > "$OUT/pipeline.log"
echo "stage_resources exit ${PIPESTATUS[0]} (124: stopped at PIPELINE_S)"
grep -E '^[a-z]+: \{' "$OUT/pipeline.log"; tail -n 5 "$OUT/pipeline.log"
for f in curves/training_curve.json eval/metrics.json; do
  cp "artifacts/$NAME/$f" "$OUT/" 2>/dev/null
done
echo "== $(date +%T) done"
