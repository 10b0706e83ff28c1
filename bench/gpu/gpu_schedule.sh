#!/bin/bash
# A schedule comparison's GPU row in one device call: wordnet-hyper (or NAME) fine-tuned with `train.schedule: auto`
# (1,500 steps of 512 at lr 2e-4 for its 62,465 training inputs: docs/pipeline.md, "The training schedule")
# through the stages, each timed by bench/stage_resources.py, with the eval outputs kept. Run from the repository
# root on an offline GPU machine prepared as bench/gpu/offline_env.sh says, plus the dataset as the download stage
# writes it (that machine reaches no Debian mirror), made here and carried in .carry/data/:
#
#   python stages/download.py --out data/wordnet-hyper --params P   # P: params.yaml with data.name wordnet-hyper
#   tar -C data -cf - wordnet-hyper | xz -9 > .carry/data/wordnet-hyper.tar.xz      # 2.6 MB
#   OUT=/some/folder bash bench/gpu/gpu_schedule.sh                                   # on the GPU machine
#
# EXTRA adds overrides: with NAME=foldoc EXTRA="-S train.max_steps=2 -S train.hnm_steps=10 -S train.val_max_queries=0"
# the whole script ran on a 2-core CPU in 3.5 min (all but offline_env.sh, whose wheels are cp312).
# Everything lands in $OUT as it finishes. As for gpu_pipeline.sh, move bench/results/runs/ and the tracked .npz and
# .png files out of the working tree for the call: the tree, .whl/ and .carry/ then come to about
# 66.1 MB of the 67.1 (64 MiB) a call carries. Compare with the fixed recipe's record
# (bench/results/runs/wordnet-hyper_fine-tuned-gpu) here afterwards: scripts/results_table.py tests the pair.
set -u
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
NAME=${NAME:-wordnet-hyper}
TAG=fine-tuned-schedule-auto-gpu
. bench/gpu/offline_env.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
mkdir -p data && tar -C data -xJf ".carry/data/$NAME.tar.xz" || exit 1

echo "== $(date +%T) stages"
python bench/stage_resources.py --name "$NAME" --tag $TAG --keep-eval --out "$OUT/stage_resources_${NAME}_$TAG.json" \
  --stages tokenize,train,embed,index,tune,memory,evaluate,significance \
  -S encoder.mode=fine-tuned -S train.schedule=auto ${EXTRA:-} 2>&1 | tr '\r' '\n' > "$OUT/stages.log"
echo "stage_resources exit ${PIPESTATUS[0]}"
grep -E '^[a-z]+: \{|train schedule' "$OUT/stages.log"; tail -n 3 "$OUT/stages.log"
cp -r "bench/results/runs/${NAME}_$TAG" "$OUT/" || exit 1

echo "== $(date +%T) done"
