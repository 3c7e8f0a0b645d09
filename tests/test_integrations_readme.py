"""The three snippets of README's "Using ELMo from flair, spaCy and the Hub", run as written, each in a fresh process."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO, subprocess_env

SECTION = "## Using ELMo from flair, spaCy and the Hub"


def readme_snippets() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    section = section[: section.index("\n## ", len(SECTION))]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def run_snippet(code: str, cwd, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env=env or subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_section_has_three_snippets():
    snippets = readme_snippets()
    assert len(snippets) == 3
    assert "elmo.integrations.flair" in snippets[0] and "add_pipe" in snippets[1] and "hf://" in snippets[2]


def test_the_flair_snippet(tmp_path):
    pytest.importorskip("flair", reason="needs flair (pip install 'elmo-bilm[flair]')")
    assert run_snippet(readme_snippets()[0], tmp_path).strip() == "torch.Size([1536])"


def test_the_spacy_snippet(tmp_path):
    pytest.importorskip("spacy", reason="needs spaCy v3 (pip install 'elmo-bilm[spacy]')")
    out = run_snippet(readme_snippets()[1], tmp_path).splitlines()
    assert out[0] == "(3, 6, 512) (6, 512)" and -1 <= float(out[1]) <= 1
    assert (tmp_path / "elmo-pipeline" / "elmo" / "weights.hdf5").is_file()
    load = "import spacy; print(spacy.load('elmo-pipeline')('A river bank').tensor.shape)"
    assert run_snippet(load, tmp_path).strip() == "(3, 512)"


def test_the_hub_snippet_offline(tmp_path):
    pytest.importorskip("huggingface_hub", reason="needs huggingface_hub (pip install 'elmo-bilm[hf]')")
    from test_integrations_hf import hf_in_resolver, write_repo

    from elmo.models import BUNDLED_DIR

    if not hf_in_resolver():
        pytest.skip("hf:// references join elmo.models.resolve after core's #54 item 1 (issue #57 item 3)")
    model = {name: (BUNDLED_DIR / "default" / name).read_bytes() for name in ("options.json", "weights.hdf5")}
    files = {**model, **{f"small/{k}": v for k, v in model.items()}}
    write_repo(tmp_path / "hf" / "hub", "your-name/elmo-english", files, {"main": "c" * 40, "v1.0": "d" * 40})
    env = dict(subprocess_env(), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    assert run_snippet(readme_snippets()[2], tmp_path, env).strip() == "(3, 2, 512)"
