"""The documentation site builds with `mkdocs build --strict` (#67 item 1): a broken link, a page missing from the
navigation, or an API or command reference that no longer resolves fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

pytest.importorskip("mkdocs", reason="needs the docs extra (pip install -e '.[docs]')")
pytest.importorskip("material", reason="needs mkdocs-material (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings_handlers.python", reason="needs mkdocstrings[python] (pip install -e '.[docs]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "\n".join(warnings) or done.stderr[-3000:]
    return out


def test_every_page_is_built(site):
    """(mkdocs.yml's validation makes a page left out of the navigation a warning, so an error here.)"""
    pages = [p.relative_to(REPO / "docs").with_suffix("") for p in (REPO / "docs").rglob("*.md")]
    missing = [str(p) for p in pages if not (site / ("" if p.name == "index" else p) / "index.html").is_file()]
    assert pages and missing == []


def test_the_command_reference_lists_every_command_and_flag(site):
    from elmo.cli import build_parser

    page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    commands = build_parser()._subparsers._group_actions[0].choices
    assert all(f"elmo {name}" in page for name in commands), sorted(commands)
    assert "--max-line-tokens" in page and "--part-lines" in page  # flags of `elmo embed`, from its parser


def test_the_api_reference_is_generated_from_the_docstrings(site):
    page = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    import elmo

    first_line = elmo.Embedder.__doc__.strip().splitlines()[0]
    assert re.sub(r"`", "", first_line)[:40] in re.sub(r"<[^>]+>", "", page).replace("&#39;", "'")


def test_the_readmes_links_into_the_site_resolve():
    """The README is not a page of the site (mkdocs checks those): its own links to files and anchors, checked here."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((?!https?://)([^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert len(links) > 20
    broken = [path for path, _ in links if not (REPO / path).exists()]
    assert broken == []
    for path, anchor in links:
        if anchor and path.endswith(".md"):
            headings = re.findall(r"^#+ (.+)$", (REPO / path).read_text(encoding="utf-8"), flags=re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"{path}#{anchor}"


def test_the_command_reference_walks_subcommands_and_fills_in_defaults():
    import argparse

    from docs_hooks import command_reference

    parser = argparse.ArgumentParser(prog="tool")
    group = parser.add_subparsers().add_parser("task", help="task things").add_subparsers()
    train = group.add_parser("train", description="Train | a model.")
    train.add_argument("--size", type=int, choices=[1, 2], default=2, help="how big (default %(default)s)")
    train.add_argument("--fast", action="store_true", help="go fast")
    page = command_reference(parser)
    assert "## `tool task`\n\ntask things" in page and "## `tool task train`\n\nTrain | a model." in page
    assert "| `--size {1,2}` | how big (default 2) | `2` |" in page and "| `--fast` | go fast |  |" in page
