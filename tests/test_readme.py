"""The README is a short guide whose links, citations and license hold; docs/development.md's module map
names every module of the package, so a newcomer's map has no holes."""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 250
TRACKER_REFERENCE = re.compile(r"\b(?:issue|session)s?\s+#?\d+|(?<![\w/`-])#\d+\b", re.IGNORECASE)
RESULT_PATH = re.compile(r"bench/results/[\w.{},/*-]*[\w}*]")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def documents() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def expand_braces(path: str) -> list[str]:
    """`a_{x,y}.json` -> `a_x.json`, `a_y.json`, as the shell reads a cited path."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[part] if i % 2 == 0 else part.split(",") for i, part in enumerate(parts)]
    return ["".join(combination) for combination in itertools.product(*choices)]


def module_map() -> str:
    """The package part of docs/development.md's module map block (from `src/raexmc/` up to `stages/`)."""
    blocks = re.findall(r"```\n(src/raexmc/\n.*?)```", read(DOCS / "development.md"), flags=re.S)
    assert len(blocks) == 1, "docs/development.md should have exactly one module map block"
    return blocks[0].split("\nstages/")[0]


def test_readme_is_short_and_keeps_the_commands_ci_runs():
    """.ci/run's first pytest line is the README's test command, its second the slow set's, both in the README."""
    lines = read(README).count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines, at most {MAX_README_LINES}"
    ci_lines = read(REPO / ".ci" / "run").splitlines()
    commands = [line for line in ci_lines if "pytest" in line and not line.startswith("#")]
    assert len(commands) == 2, f".ci/run should run pytest on two lines, the test command and the slow set: {commands}"
    assert commands[0].startswith("./scripts/setup.sh --test"), commands[0]
    for ci_command in commands:
        assert ci_command in read(README), f"README.md lacks a test command .ci/run runs: {ci_command}"


def test_readme_links_to_every_docs_page_and_each_link_resolves():
    links = set(re.findall(r"\]\((docs/[^)#\s]+)", read(README)))
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")}
    assert pages <= links, f"README.md does not link the docs pages {sorted(pages - links)}"
    missing = sorted(link for link in links if not (REPO / link).exists())
    assert not missing, f"README.md links to missing files: {missing}"


def test_docs_links_between_pages_resolve():
    broken = []
    for page in sorted(DOCS.glob("*.md")):
        for link in re.findall(r"\]\((?![a-z][a-z+.-]*:)([^)#\s]+)", read(page)):
            target = (page.parent / link).resolve()
            if not target.exists():
                broken.append(f"{page.name} -> {link}")
    assert not broken, f"broken links in docs/: {broken}"


def test_no_tracker_or_release_references():
    found = [f"{path.relative_to(REPO)}: {match.group(0)!r}"
             for path in documents() for match in TRACKER_REFERENCE.finditer(read(path))]
    assert not found, f"tracker issue/session numbers a reader cannot resolve: {found}"
    found = [f"{path.relative_to(REPO)}: {match.group(0)!r}" for path in documents()
             for match in re.finditer(r"\b(?:this|previous|last|earlier) release\b", read(path), re.IGNORECASE)]
    assert not found, f"'this/previous release' has no tag to resolve it; date it against CHANGELOG.md: {found}"
    assert (REPO / "CHANGELOG.md").exists()


def test_license_matches_pyproject():
    license_name = tomllib.loads(read(REPO / "pyproject.toml"))["project"]["license"]
    assert license_name == "Apache-2.0", f"update this test for pyproject's license {license_name!r}"
    text = read(REPO / "LICENSE")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text, "LICENSE should hold the whole Apache License 2.0 text"


def cited_records(text: str) -> list[str]:
    """Every bench/results path a text cites, less templates (`..._<name>_...`, `...-VARIANT`)."""
    cited = []
    for match in RESULT_PATH.finditer(text):
        template = text[match.end():match.end() + 1] == "<" or re.search(r"[A-Z]{3,}", match.group(0))
        if not template:
            cited.extend(expand_braces(match.group(0).rstrip(".,")))
    return cited


def test_every_cited_record_exists_read_as_the_shell_reads_paths():
    missing = [f"{path.relative_to(REPO)}: {name}" for path in documents() for name in cited_records(read(path))
               if not any(REPO.glob(name))]
    assert not missing, f"cited records that do not exist: {missing}"
    text = ("see `bench/results/a_{x,y}-full.json`, bench/results/b.json. Templates: "
            "`bench/results/stage_resources_<name>_gpu.json`, bench/results/runs/foldoc_ablation-VARIANT")
    assert cited_records(text) == ["bench/results/a_x-full.json", "bench/results/a_y-full.json", "bench/results/b.json"]


def test_the_module_map_names_every_module_and_no_other():
    names = set(re.findall(r"[\w]+\.py", module_map()))
    modules = {path.name for path in (REPO / "src" / "raexmc").rglob("*.py")}
    missing = sorted(modules - names - {"__init__.py"})
    assert not missing, f"docs/development.md's module map lacks {missing}"
    stale = sorted(names - modules)
    assert not stale, f"docs/development.md's module map names modules that do not exist: {stale}"


def test_the_readme_python_blocks_run_on_a_packaged_model(tmp_path, monkeypatch, capsys, lf_folder, tiny_model):
    """Each block runs as written, in a project whose artifacts/foldoc is a tiny pipeline packaged the way the
    stages package one (tests/rae/test_predictor.py's build_pipeline): it prints each of the 5 labels' ids, and
    build_model's block builds a model of MiniLM from 24 texts, and fine_tune one of MiniLM trained on them for 2 steps,
    whose first answer is the label they say."""
    from tests.rae.test_predictor import build_pipeline

    built = build_pipeline(tmp_path, lf_folder, tiny_model, "hnsw")
    built.rename(built.parent / "foldoc")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # what building it printed
    blocks = re.findall(r"```python\n(.*?)```", read(README), flags=re.S)
    assert blocks, "README.md has no ```python block"
    for block in blocks:
        assert block.count("\n") <= 10, f"a README Python example is longer than 10 lines:\n{block}"
        exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    for call, folder in (("build_model", "my-model"), ("fine_tune", "my-tuned")):
        built = [line for line in printed if line.startswith(f"{call}:")]  # MiniLM ranks the language label first
        assert len(built) == 1 and built[0].startswith(f"{call}: ['programming language', "), printed
        assert (tmp_path / folder / "manifest.json").is_file()
        printed.remove(built[0])
    assert sorted(line.split()[0] for line in printed) == ["l0", "l1", "l2", "l3", "l4"], printed  # tests/helpers.py's
