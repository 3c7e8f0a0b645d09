"""hf://OWNER/REPO[@REVISION][/PATH] through huggingface_hub's cache, offline: a cache laid out as the Hub lays it
(blob symlinks, and plain files as on a system without symlinks), every entry point, the clear errors."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import subprocess_env

pytest.importorskip("huggingface_hub", reason="needs huggingface_hub (pip install 'elmo-bilm[hf]')")

import elmo  # noqa: E402
from elmo.errors import ModelFileError, OfflineError  # noqa: E402
from elmo.hub.huggingface import HubReference, hf_file, hf_model_dir  # noqa: E402

COMMIT, TAG_COMMIT = "a" * 40, "b" * 40


def write_repo(hub: Path, repo_id: str, files: dict[str, bytes], refs: dict[str, str], symlinks: bool = True) -> Path:
    """models--OWNER--REPO with refs/<name> -> commit and snapshots/<commit>/<path>, each a symlink into
    blobs/<sha256> (the Hub's layout) or, with symlinks=False, the file itself (huggingface_hub on Windows)."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    for name, commit in refs.items():
        (repo / "refs" / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / name).write_text(commit)
        for path, data in files.items():
            target = repo / "snapshots" / commit / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if not symlinks:
                target.write_bytes(data)
                continue
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            if not target.exists():
                target.symlink_to(os.path.relpath(blob, target.parent))
    return repo


@pytest.fixture
def hub_cache(tmp_path, allennlp_dir, monkeypatch):
    """HF_HOME with the fixture model in owner/elmo-tiny (root, main), owner/elmo-plain (plain files) and
    owner/many (sub/folder, at tag v1 only); huggingface_hub offline."""
    from huggingface_hub import constants

    model = {"options.json": (allennlp_dir / "options.json").read_bytes(),
             "weights.hdf5": (allennlp_dir / "lm_weights.hdf5").read_bytes()}
    hub = tmp_path / "hf" / "hub"
    write_repo(hub, "owner/elmo-tiny", model, {"main": COMMIT})
    write_repo(hub, "owner/elmo-plain", model, {"main": COMMIT}, symlinks=False)
    write_repo(hub, "owner/many", {f"sub/folder/{k}": v for k, v in model.items()}, {"v1": TAG_COMMIT})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf"


def hf_in_resolver() -> bool:
    """Whether elmo.models.resolve has the hf:// kind (it joins after core's "#54 item 1" commit)."""
    import elmo.models as models

    kinds = getattr(models, "FETCH_KINDS", ()) + getattr(models, "KINDS", ())
    return any("huggingface" in kind.__name__ for kind in kinds)


def test_references_parse():
    assert HubReference.parse("hf://o/r") == HubReference("o/r", None, "")
    assert HubReference.parse("hf://o/r@v1.0/a/b") == HubReference("o/r", "v1.0", "a/b")
    assert HubReference.parse("hf://o/r@refs%2Fpr%2F3") == HubReference("o/r", "refs/pr/3", "")
    assert str(HubReference.parse("hf://o/r@v1/a")) == "hf://o/r@v1/a"
    for bad in ("hf://o", "hf://o/", "hf:///r", "hf://o/r@", "hf://o/r//x"):
        with pytest.raises(ModelFileError, match="expected hf://|empty"):
            HubReference.parse(bad)


@pytest.mark.parametrize("reference", ["hf://owner/elmo-tiny", "hf://owner/elmo-plain", f"hf://owner/elmo-tiny@{COMMIT}",
                                       "hf://owner/many@v1/sub/folder"])
def test_a_cached_repository_gives_the_model_folder_offline(hub_cache, reference, allennlp_dir):
    folder = hf_model_dir(reference)
    assert folder.is_relative_to(hub_cache / "hub")
    assert (folder / "weights.hdf5").read_bytes() == (allennlp_dir / "lm_weights.hdf5").read_bytes()


def test_one_file_by_reference(hub_cache, allennlp_dir):
    assert hf_file("hf://owner/many@v1/sub/folder/options.json").read_bytes() == (
        allennlp_dir / "options.json").read_bytes()
    with pytest.raises(ModelFileError, match="names a repository, not a file"):
        hf_file("hf://owner/elmo-tiny")


def test_a_missing_repository_or_file_is_a_clear_error(hub_cache):
    with pytest.raises(OfflineError, match=r"repository owner/absent is not in the Hugging Face cache .*HF_HUB_OFFLINE"):
        hf_model_dir("hf://owner/absent")
    with pytest.raises(OfflineError, match=r"sub/options.json at revision main is not in the cached copy of owner/elmo-tiny"):
        hf_model_dir("hf://owner/elmo-tiny/sub")
    with pytest.raises(OfflineError, match="at revision v2 is not in the cached copy"):
        hf_model_dir("hf://owner/many@v2/sub/folder")


def test_import_elmo_imports_no_framework():
    code = ("import sys, elmo, elmo.integrations, elmo.models, elmo.hub; "
            "print(sorted(m for m in ('flair', 'spacy', 'huggingface_hub', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), check=True)
    assert out.stdout.strip() == "[]"


ENTRY_POINTS = r"""
import json, subprocess, sys
import numpy as np
import elmo
from elmo.cli import main

ref, want = sys.argv[1], np.load(sys.argv[2])
sentence = ["The", "bank", "raised", "rates", "."]
got = {
    "resolve": elmo.Embedder(elmo.models.resolve(ref).load()).embed_sentence(sentence),
    "load_model": elmo.Embedder(elmo.load_model(ref)).embed_sentence(sentence),
    "Embedder.from_model": elmo.Embedder.from_model(ref).embed_sentence(sentence),
    "options/weights": elmo.Embedder.from_files(ref + "/options.json", ref + "/weights.hdf5").embed_sentence(sentence),
}
elmo_module = elmo.Elmo.from_pretrained(ref, 1, dropout=0.0)
assert elmo_module(elmo.batch_to_ids([sentence]))["elmo_representations"][0].shape[-1] == want.shape[-1]
open("in.txt", "w").write(" ".join(sentence) + "\n")
assert main(["embed", "in.txt", "out.hdf5", "--model", ref]) == 0
import h5py
got["elmo embed --model"] = h5py.File("out.hdf5")["0"][...]
from flair.data import Sentence
from elmo.integrations.flair import ELMoEmbeddings
s = Sentence(" ".join(sentence))
ELMoEmbeddings(ref, embedding_mode="all").embed(s)
got["flair"] = np.stack([t.get_embedding().numpy() for t in s]).reshape(len(s), 3, -1).transpose(1, 0, 2)
import spacy
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"model": ref})
got["spacy"] = nlp(" ".join(sentence))._.elmo
for where, array in got.items():
    assert np.abs(array - want).max() < 1e-6, where
assert "huggingface_hub" in sys.modules
print(json.dumps(sorted(got)))
"""


def test_every_entry_point_takes_an_hf_reference_offline(tmp_path, allennlp_dir):
    """In a fresh process whose only hint is HF_HOME + HF_HUB_OFFLINE=1 (no network): resolve, load_model,
    Embedder, Elmo.from_pretrained, options/weights files, `elmo embed --model`, flair and spaCy."""
    pytest.importorskip("flair", reason="needs flair")
    pytest.importorskip("spacy", reason="needs spaCy")
    if not hf_in_resolver():
        pytest.skip("hf:// references join elmo.models.resolve after core's #54 item 1 (issue #57 item 3)")
    files = {name: (allennlp_dir / source).read_bytes()
             for name, source in (("m/options.json", "options.json"), ("m/weights.hdf5", "lm_weights.hdf5"))}
    write_repo(tmp_path / "hf" / "hub", "owner/tiny", files, {"v2": COMMIT})
    want = elmo.Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5").embed_sentence(
        ["The", "bank", "raised", "rates", "."])
    np.save(tmp_path / "want.npy", want)
    env = dict(subprocess_env(), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", ELMO_OFFLINE="1",
               ELMO_CACHE=str(tmp_path / "elmo-cache"))
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run([sys.executable, "-c", ENTRY_POINTS, "hf://owner/tiny@v2/m", str(tmp_path / "want.npy")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(json.loads(done.stdout.strip().splitlines()[-1])) == 7


def test_without_huggingface_hub_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if not installed
    with pytest.raises(ModelFileError, match=r"elmo-bilm\[hf\]"):
        hf_model_dir("hf://owner/elmo-tiny")
