"""SeqVec by name from the catalog (served from 127.0.0.1, never the network), and SeqVec's README and bio_embeddings'
code with only the import changed, against AllenNLP's own code (tests/data/seqvec: scripts/make_seqvec_references.py).

The model is SeqVec's shapes with random weights, made again from its seed (374 MB, a few seconds: the slow tests).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from hub_server import serve
from test_hub_download import hub_env  # noqa: F401 (fixture)
from test_proteins import SMALL

import elmo
import elmo.models
from elmo.cli import main
from elmo.errors import DownloadError
from elmo.files.fileio import hash_file
from elmo.hub.catalog import RemoteFile, find_published
from elmo.proteins import WARMUP_SEQUENCE, SeqVecEmbedder, write_random_model

DATA = REPO / "tests" / "data" / "seqvec"
REFERENCES = DATA / "peer-references.npz"
MADE = json.loads((DATA / "peer-references.json").read_text())
DOC = REPO / "docs" / "proteins.md"

README_SNIPPET = """\
from elmo.proteins import ElmoEmbedder  # was: from allennlp.commands.elmo import ElmoEmbedder
from pathlib import Path

model_dir = Path('path/to/pretrained/SeqVec_directory')
weights = model_dir / 'weights.hdf5'
options = model_dir / 'options.json'
embedder = ElmoEmbedder(options,weights, cuda_device=-1) # cuda_device=-1 for CPU

seq = 'SEQWENCE' # your amino acid sequence
embedding = embedder.embed_sentence(list(seq)) # List-of-Lists with shape [3,L,1024]

import torch
residue_embd = torch.tensor(embedding).sum(dim=0) # Tensor with shape [L,1024]
protein_embd = torch.tensor(embedding).sum(dim=0).mean(dim=0) # Vector with shape [1024]

seq1 = 'SEQWENCE' # your amino acid sequence
seq2 = 'PROTEIN'
seqs = [list(seq1), list(seq2)]
seqs.sort(key=len) # sorting is crucial for speed
embedding = embedder.embed_sentences(seqs) # returns: List-of-Lists with shape [3,L,1024]
"""

BIO_EMBEDDINGS_SNIPPET = """\
from elmo.proteins import SeqVecEmbedder  # was: from bio_embeddings.embed import SeqVecEmbedder

embedder = SeqVecEmbedder()

embedding = embedder.embed("SEQVENCE")
reduced = embedder.reduce_per_protein(embedding)
many = list(embedder.embed_many(["PROTEIN", "SEQVENCE", "MKTAYIAKQR"], batch_size=16))
"""


@pytest.fixture(scope="module")
def references() -> dict[str, np.ndarray]:
    with np.load(REFERENCES) as f:
        return dict(f)


@pytest.fixture(scope="module")
def seqvec_model(tmp_path_factory):
    """SeqVec's shapes, the reference's random weights (seed 0): the same bytes the peer read."""
    files = write_random_model(tmp_path_factory.mktemp("seqvec") / "uniref50_v2", seed=0)
    assert hash_file(files.weight_file).hexdigest() == MADE["weights_sha256"], "the seed no longer gives the weights"
    return files


def like_the_peer(got: np.ndarray, want: np.ndarray, columns: bool = True) -> None:
    """Equal to 1e-5 of the reference's largest value (the reference keeps every column_step-th column)."""
    got = got[..., :: MADE["column_step"]] if columns else got
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max(), rtol=0)


@pytest.fixture
def seqvec_served(hub_env, monkeypatch, seqvec_model):  # noqa: F811
    """The catalog's `seqvec` with its URLs on a 127.0.0.1 server and the md5s of the random files it serves."""
    data = {name: Path(path).read_bytes() for name, path in (("options.json", seqvec_model.options_file),
                                                             ("weights.hdf5", seqvec_model.weight_file))}
    with serve({f"/seqvec/{name}": blob for name, blob in data.items()}) as server:
        real = find_published("seqvec")
        local = dataclasses.replace(real, **{role: RemoteFile(server.url(f"/seqvec/{name}"),
                                                              md5=hashlib.md5(data[name]).hexdigest())
                                             for role, name in (("options", "options.json"), ("weights", "weights.hdf5"))})
        monkeypatch.setattr(elmo.models, "find_published", lambda name: local if name.lower() == "seqvec" else None)
        yield server


def test_the_catalog_names_seqvecs_published_files():
    seqvec, archive = find_published("seqvec"), find_published("seqvec-zip")
    assert seqvec.options.url == "https://rostlab.org/~deepppi/embedding_repo/embedding_models/seqvec/options.json"
    assert seqvec.weights.url == "https://rostlab.org/~deepppi/embedding_repo/embedding_models/seqvec/weights.hdf5"
    assert (seqvec.options.md5, seqvec.weights.md5) == ("cede355187778de3ac302a83c761f5f9",
                                                        "0249d59249a50b43b79f641ff2ba7e88")
    assert archive.archive.url == "https://rostlab.org/~deepppi/seqvec.zip" and archive.format == "allennlp-archive"
    assert "rostlab.org/~deepppi/embedding_repo/embedding_models/seqvec" in seqvec.sources[0].says
    assert f"({archive.archive.url})" in archive.sources[0].says
    assert seqvec.vector_size == archive.vector_size == SeqVecEmbedder.embedding_dimension == 1024


def test_a_file_other_than_the_published_one_is_refused(hub_env, tmp_path, monkeypatch):  # noqa: F811
    """The verified cache checks the published md5s: other bytes under SeqVec's name never reach the cache."""
    files = write_random_model(tmp_path / "m", SMALL)
    with serve({"/o.json": files.options_file.read_bytes(), "/w.hdf5": files.weight_file.read_bytes()}) as server:
        real = find_published("seqvec")
        moved = dataclasses.replace(real, options=dataclasses.replace(real.options, url=server.url("/o.json")),
                                    weights=dataclasses.replace(real.weights, url=server.url("/w.hdf5")))
        monkeypatch.setattr(elmo.models, "find_published", lambda name: moved if name == "seqvec" else None)
        with pytest.raises(DownloadError, match="an md5 other than the published cede355187778de3ac302a83c761f5f9"):
            elmo.models.resolve("seqvec")
        assert not list((hub_env / "elmo-cache").rglob("o.json"))


def test_the_zip_by_name_is_one_model_directory(hub_env, tmp_path, monkeypatch):  # noqa: F811
    files = write_random_model(tmp_path / "m", SMALL)
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w") as z:  # the layout SeqVec's zip unpacks to: uniref50_v2/{options.json,weights.hdf5}
        z.write(files.options_file, "uniref50_v2/options.json")
        z.write(files.weight_file, "uniref50_v2/weights.hdf5")
    with serve({"/seqvec.zip": blob.getvalue()}) as server:
        real = find_published("seqvec-zip")
        moved = dataclasses.replace(real, archive=RemoteFile(server.url("/seqvec.zip")))
        monkeypatch.setattr(elmo.models, "find_published", lambda name: moved if name == "seqvec-zip" else None)
        got = elmo.Embedder.from_model("seqvec-zip").embed_batch([list("SEQWENCE")])[0]
    want = elmo.Embedder.from_files(files.options_file, files.weight_file).embed_batch([list("SEQWENCE")])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_seqvec_by_name_wherever_a_model_is_taken(seqvec_served, seqvec_model, tmp_path):
    want = elmo.Embedder.from_files(seqvec_model.options_file, seqvec_model.weight_file).embed_batch([list("MKV")])[0]
    for embedder in (elmo.Embedder.from_model("seqvec"), elmo.Embedder(elmo.load_model("seqvec")),
                     SeqVecEmbedder(stateful=False).embedder):
        np.testing.assert_array_equal(embedder.embed_batch([list("MKV")])[0], want)
        del embedder
    (tmp_path / "in.fa").write_text(">P1\nMKV\n")
    (tmp_path / "in.txt").write_text("M K V\n")
    assert main(["embed-proteins", str(tmp_path / "in.fa"), str(tmp_path / "out"), "--stateless"]) == 0
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--model", "seqvec"]) == 0
    assert sum(seqvec_served.gets.values()) == 2  # each file downloaded once, then from the verified cache


@pytest.mark.slow
def test_seqvecs_readme_code_with_only_the_import_changed_gives_the_peers_numbers(seqvec_model, references):
    assert README_SNIPPET in DOC.read_text(encoding="utf-8")
    scope: dict = {}
    exec(README_SNIPPET.replace("path/to/pretrained/SeqVec_directory", str(seqvec_model.options_file.parent)), scope)
    like_the_peer(scope["residue_embd"].numpy(), references["readme_sentence"].sum(0))  # the first embedding, summed
    np.testing.assert_allclose(scope["protein_embd"].numpy(), scope["residue_embd"].numpy().mean(0), rtol=1e-6)
    batch = list(scope["embedding"])  # embed_sentences after embed_sentence: row 0 carries SEQWENCE's state
    assert len(batch) == 2
    for i, got in enumerate(batch):
        like_the_peer(got, references[f"readme_sentences_{i}"])


@pytest.mark.slow
def test_bio_embeddings_code_with_only_the_import_changed_gives_the_peers_numbers(seqvec_served, references):
    assert BIO_EMBEDDINGS_SNIPPET in DOC.read_text(encoding="utf-8")
    scope: dict = {}
    exec(BIO_EMBEDDINGS_SNIPPET, scope)  # SeqVecEmbedder() with no files: `seqvec` from the (served) catalog
    like_the_peer(scope["embedding"], references["bio_embed"])
    like_the_peer(scope["reduced"], references["bio_reduced"], columns=False)
    for i, got in enumerate(scope["many"]):
        like_the_peer(got, references[f"bio_many_{i}"])


@pytest.mark.slow
def test_stateless_vectors_are_allennlps_from_zero_state_in_windows_too(seqvec_model, references):
    stateless = SeqVecEmbedder(options_file=seqvec_model.options_file, weights_file=seqvec_model.weight_file,
                               stateful=False, window=16)
    like_the_peer(stateless.embed("SEQWENCE"), references["stateless_seqwence"])
    like_the_peer(stateless.embed(WARMUP_SEQUENCE), references["stateless_warmup"])  # 96 residues in 16s
    like_the_peer(elmo.ElmoEmbedder(seqvec_model.options_file, seqvec_model.weight_file).embed_sentence(
        list("SEQWENCE")), references["stateless_seqwence"])
    # 0.9's first call starts from zero state; after the warm-up the same protein's vectors differ
    np.testing.assert_array_equal(references["readme_sentence"], references["stateless_seqwence"])
    carried = references["bio_embed"]
    assert np.abs(stateless.embed("SEQVENCE")[..., :: MADE["column_step"]] - carried).max() > 1e-3 * np.abs(carried).max()
