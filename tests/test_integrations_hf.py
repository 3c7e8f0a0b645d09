"""hf://OWNER/REPO[@REVISION][/PATH] through huggingface_hub's cache, offline: a cache laid out as the Hub lays it
(blob symlinks, and plain files as on a system without symlinks), every entry point, the clear errors."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, subprocess_env

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
