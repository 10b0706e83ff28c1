"""Render the project's DVC plots as PNG pictures, as `dvc plots show` draws them (its Vega-Lite specs, with
the templates dvc.yaml names), for documents that cannot hold DVC's HTML.

    pip install vl-convert-python   # not a dependency of the project
    python scripts/render_plots.py docs/plots

writes <folder>/<plot>.png for every plot that has data (the training curve only where the run trained and validated).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def main(folder: str) -> None:
    try:
        import vl_convert
    except ImportError:
        sys.exit("render_plots: needs vl-convert-python (pip install vl-convert-python)")
    shown = subprocess.run(["dvc", "plots", "show", "--json"], capture_output=True, text=True, check=True)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for path, renderers in json.loads(shown.stdout)["data"].items():
        for renderer in renderers:
            target = out / f"{Path(path).stem}.png"
            target.write_bytes(vl_convert.vegalite_to_png(renderer["content"], scale=2))
            print(target)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
