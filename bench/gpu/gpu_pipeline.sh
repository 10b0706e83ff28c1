#!/bin/bash
# The pipeline's own stages on one GPU, each timed by bench/stage_resources.py, in one device call: NAME's
# chain from STAGES (default download to evaluate) with the overrides in EXTRA (`-S key=value ...`), recorded as
# $OUT/stage_resources_<NAME>_<TAG>.json after every stage, so a run cut short (PIPELINE_S) keeps what it
# measured. Run from the repository root on an offline GPU machine prepared as bench/gpu/offline_env.sh says.
# The two chains of issue 53:
#
#   OUT=/o NAME=synthetic-LF-AmazonTitles-1.3M TAG=minilm-fine-tuned-gpu EXTRA="-S encoder.mode=fine-tuned
#     -S tokenize.input_fields=title -S tokenize.input_max_len=32 -S train.batch_size=896 -S train.lr=3.0e-4
#     -S train.max_steps=300 -S train.hnm_steps=150 -S train.warmup_steps=30" bash bench/gpu/gpu_pipeline.sh
#   OUT=/o NAME=synthetic-LF-AmazonTitles-131K TAG=paper-preset-distilbert-shaped-gpu ENCODER=distilbert-shaped
#     EXTRA="<the LF-AmazonTitles-131K preset's keys, train.nproc=1 train.batch_size=7168>" bash bench/gpu/...
#
# ENCODER=distilbert-shaped builds DistilBERT's shape (6 layers of 768, 12 heads, 3,072 wide) with random weights
# and MiniLM's tokenizer (the same uncased WordPiece vocabulary) first: the hub is out of reach there.
# The tracked tree with .whl/ and .carry/ comes to more than the 64 MiB a device call carries: move
# bench/results/runs/ and the tracked .npz and .png files out of the working tree for the call (nothing here
# reads them), and put them back after it (`git status` shows them deleted until then).
set -u
: "${OUT:?set OUT to the folder for the results}" "${NAME:?set NAME to a dataset}" "${TAG:?set TAG}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
. bench/gpu/offline_env.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "${ENCODER:-}" = distilbert-shaped ]; then
  python scripts/make_tiny_encoder.py --out /tmp/distilbert-shaped --hidden 768 --layers 6 --heads 12 \
    --intermediate 3072 --max-len 512 || exit 1
  EXTRA="${EXTRA:-} -S encoder.name=/tmp/distilbert-shaped"
fi
LOG="$OUT/${NAME}_$TAG.log"
echo "== $(date +%T) $NAME $TAG"
STAGES=${STAGES:-download,tokenize,train,embed,index,memory,tune,evaluate}
# shellcheck disable=SC2086  # EXTRA is a list of -S key=value words
timeout "${PIPELINE_S:-480}" python bench/stage_resources.py --name "$NAME" --tag "$TAG" \
  --out "$OUT/stage_resources_${NAME}_$TAG.json" --stages "$STAGES" ${EXTRA:-} 2>&1 | tr '\r' '\n' \
  | grep --line-buffered -v -e '^\s*$' > "$LOG"
echo "stage_resources exit ${PIPESTATUS[0]} (124: stopped at PIPELINE_S)"
grep -E '^[a-z]+: \{|schedule|queries/s' "$LOG" | tail -n 20; tail -n 3 "$LOG"
for f in curves/training_curve.json eval/metrics.json; do
  cp "artifacts/$NAME/$f" "$OUT/${NAME}_$TAG.$(basename "$f")" 2>/dev/null
done
echo "== $(date +%T) done"
