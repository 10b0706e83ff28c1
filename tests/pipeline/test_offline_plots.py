"""`dvc plots show` pages draw without a network: the project's DVC config names setup's template, which inlines
Vega, Vega-Lite and Vega-Embed, and headless Chromium with every host name unresolvable draws the plot from it."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.helpers import REPO, dvc, sh
from tests.pipeline.test_mlflow_ui import BROWSER_FLAGS

NO_NETWORK = "--host-resolver-rules=MAP * ~NOTFOUND"  # any host name fails to resolve, a CDN's included


@pytest.mark.slow
def test_a_plots_page_draws_its_plot_with_no_network(tmp_path):
    named = dvc("config", "plots.html_template", cwd=REPO).stdout.strip()
    template = (REPO / ".dvc" / named).resolve()
    assert template.is_file(), f"{template} is missing: run `scripts/setup.sh --test` (it needs npm)"
    repo = tmp_path / "repo"
    repo.mkdir()
    sh("git", "init", "-q", cwd=repo)
    dvc("init", "-q", cwd=repo)
    (repo / "sweep.json").write_text(json.dumps([{"lambda": x / 10, "P@1": 40 + x} for x in range(6)]))
    dvc("plots", "show", "sweep.json", "-x", "lambda", "-y", "P@1", "--html-template", str(template),
        "--out", "page", cwd=repo)
    page = repo / "page" / "index.html"
    assert "<script src=" not in page.read_text()
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed: run `scripts/setup.sh --test`"
    drawn = subprocess.run([chromium, *BROWSER_FLAGS, NO_NETWORK, f"--user-data-dir={tmp_path / 'profile'}",
                            "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    assert 'class="marks"' in drawn  # the canvas Vega draws into, there only once the plot is drawn
