"""Every config block of the docs (```ini, ```cfg) is valid when pasted as printed: spaCy's own config parser
(thinc's `Config().from_str`, which `spacy train` and `spacy debug config` use) reads it, and no value keeps
text that was meant as a comment. configparser keeps an inline `# ...` in the value, so `dropout = 0.5  # on the
mix` is the string "0.5  # on the mix", which spaCy then refuses ("... is not a float")."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

pytest.importorskip("thinc", reason="needs the spacy extra (pip install -e '.[spacy]')")

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>ini|cfg)\s*$")
NUMBER_WITH_TAIL = re.compile(r"^\s*[-+]?(?:\d|\.\d)")  # a value that starts as a number but did not parse as one


def config_blocks() -> list[tuple[str, int, str]]:
    """(page, line of the opening fence, text) of every ini/cfg block in README.md and docs/."""
    blocks = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        lines = path.read_text(encoding="utf-8").split("\n")
        i = 0
        while i < len(lines):
            opening = FENCE.match(lines[i])
            i += 1
            if not opening:
                continue
            start, indent, body = i, len(opening["indent"]), []
            while i < len(lines) and not lines[i].strip().startswith(opening["fence"]):
                body.append(lines[i][indent:])
                i += 1
            i += 1
            blocks.append((str(path.relative_to(REPO)), start, "\n".join(body)))
    return blocks


def leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            yield from leaves(value, name)
        else:
            yield name, value


def bad_values(text: str) -> list[str]:
    """What spaCy would refuse or misread in one block (interpolation left for spaCy: a block is a part of a file)."""
    from thinc.api import Config

    sections = re.findall(r"^\[([^\]]+)\]", text, flags=re.MULTILINE)
    parents = {".".join(s.split(".")[:k]) for s in sections for k in range(1, s.count(".") + 1)} - set(sections)
    pasted_into = "".join(f"[{p}]\n" for p in sorted(parents))  # the file a block is pasted into has them
    found = []
    for name, value in leaves(Config().from_str(pasted_into + text, interpolate=False)):
        if not isinstance(value, str) or value.startswith("${"):
            continue
        if re.search(r"\s#", value):
            found.append(f"{name}: an inline comment kept in the value: {value!r}")
        elif NUMBER_WITH_TAIL.match(value):
            found.append(f"{name}: not a number: {value!r}")
        elif value[:1] in "\"'":
            found.append(f"{name}: quotes kept in the value: {value!r}")
    return found


def test_the_check_finds_inline_comments_and_numbers_that_are_strings():
    text = ('[a]\n@architectures = "elmo.ELMoEmbed.v1"\nwidth = ${b.width}\nmodel = "default"  # a reference\n'
            "# a comment on its own line is fine\ndropout = 0.5  # on the mix\ncache_mb = 2048\nthreads = null\n")
    assert bad_values(text) == ["a.model: an inline comment kept in the value: '\"default\"  # a reference'",
                                "a.dropout: an inline comment kept in the value: '0.5  # on the mix'"]
    assert bad_values("[a]\nrate = 1e-3x\nname = \"x\"\n") == ["a.rate: not a number: '1e-3x'"]


def test_every_config_block_in_the_docs_parses_with_spacys_parser():
    blocks = config_blocks()
    assert any(page == "docs/integrations.md" for page, _, _ in blocks)  # the spaCy layer's block is found
    problems = {f"{page}:{line}": found for page, line, text in blocks if (found := bad_values(text))}
    assert problems == {}
