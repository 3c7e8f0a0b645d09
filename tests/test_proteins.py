"""elmo.proteins on a small SeqVec-like model (random weights, seconds): bio_embeddings' API and batching, FASTA in
with one-line errors, bio_embeddings' HDF5 layout, resuming, and long proteins exactly in windows."""

from __future__ import annotations

import csv
import gzip
import hashlib

import h5py
import numpy as np
import pytest

import elmo
from elmo.cli import main
from elmo.errors import InputError
from elmo.proteins import SeqVecEmbedder, write_random_model
from elmo.proteins.fasta import read_fasta
from elmo.proteins.pipeline import EMBEDDINGS_FILE, MAPPING_FILE, PROGRESS_FILE, REDUCED_FILE, embed_fasta
from elmo.proteins.seqvec import residue_batches

SMALL = {"lstm": {"use_skip_connections": True, "projection_dim": 16, "cell_clip": 3, "proj_clip": 3, "dim": 32,
                  "n_layers": 2},
         "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 2, "embedding": {"dim": 4},
                      "n_characters": 262, "max_characters_per_token": 50}}
PROTEINS = {"P1": "MKTAYIAKQRQISFVKSHFSRQ", "P2": "SEQWENCE", "P3": "PROTEIN", "P4": "MKV", "P5": "ACDEFGHIKLMNPQRSTVWYUOBZX"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp("small"), SMALL, seed=1)


def seqvec(model, **kwargs) -> SeqVecEmbedder:
    return SeqVecEmbedder(options_file=model.options_file, weights_file=model.weight_file, **kwargs)


def write_fasta(path, records: dict[str, str], width: int = 10):
    path.write_text("".join(f">{k} some description\n" + "\n".join(s[i:i + width] for i in range(0, len(s), width))
                            + "\n" for k, s in records.items()))
    return path


def test_embed_is_090s_embed_sentence_and_the_state_carries(model):
    stateful, stateless = seqvec(model, warmup_rounds=0), seqvec(model, stateful=False)
    plain = elmo.Embedder.from_files(model.options_file, model.weight_file)
    first = stateful.embed("SEQWENCE")
    assert first.shape == (3, 8, 32) and first.dtype == np.float32
    np.testing.assert_array_equal(first, plain.embed_batch([list("SEQWENCE")])[0])  # fresh state = zero state
    again = stateful.embed("SEQWENCE")
    assert np.abs(again - first).max() > 1e-3  # 0.9's carried state: the same protein, other vectors
    np.testing.assert_array_equal(stateless.embed("SEQWENCE"), stateless.embed("SEQWENCE"))
    stateful.reset_states()
    np.testing.assert_array_equal(stateful.embed("SEQWENCE"), first)


def test_the_warm_up_is_bio_embeddings_four_embeddings_of_its_sequence(model):
    from elmo.proteins import WARMUP_SEQUENCE, ElmoEmbedder

    warmed = seqvec(model)
    by_hand = ElmoEmbedder(model.options_file, model.weight_file)
    for _ in range(4):
        by_hand.embed_sentence(list(WARMUP_SEQUENCE))
    np.testing.assert_array_equal(warmed.embed("PROTEIN"), by_hand.embed_sentence(list("PROTEIN")))
    assert len(WARMUP_SEQUENCE) == 96 and WARMUP_SEQUENCE.startswith("MGSSHHHHHHSSGLVPRGSH")


def test_residue_batches_are_bio_embeddings_embed_many_batches():
    seqs = ["A" * n for n in (5, 4, 7, 20, 1, 3, 9)]
    assert [[len(s) for s in b] for b in residue_batches(seqs, 10)] == [[5, 4], [7], [20], [1, 3], [9]]
    assert [[len(s) for s in b] for b in residue_batches(seqs, 100)] == [[5, 4, 7, 20, 1, 3, 9]]
    with pytest.raises(InputError, match="batch_size must be a number of residues >= 1, found 0"):
        list(residue_batches(seqs, 0))


def test_embed_many_batches_and_reduce_per_protein(model):
    embedder = seqvec(model, stateful=False)
    seqs = list(PROTEINS.values())
    one_by_one = [embedder.embed(s) for s in seqs]
    for batched in (list(embedder.embed_many(seqs, batch_size=30)), list(embedder.embed_many(seqs))):
        for got, want in zip(batched, one_by_one, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    reduced = SeqVecEmbedder.reduce_per_protein(one_by_one[0])
    np.testing.assert_allclose(reduced, one_by_one[0].sum(0).mean(0), rtol=1e-6)
    assert reduced.shape == (32,) and SeqVecEmbedder.reduce_per_residue(one_by_one[0]).shape == (22, 32)
    assert (SeqVecEmbedder.embedding_dimension, SeqVecEmbedder.number_of_layers) == (1024, 3)


def test_model_directory_in_both_layouts(model, tmp_path):
    bio = tmp_path / "bio"
    bio.mkdir()
    (bio / "options_file").write_bytes(model.options_file.read_bytes())
    (bio / "weights_file").write_bytes(model.weight_file.read_bytes())
    want = seqvec(model, stateful=False).embed("PROTEIN")
    for folder in (model.options_file.parent, bio):
        np.testing.assert_array_equal(SeqVecEmbedder(model_directory=folder, stateful=False).embed("PROTEIN"), want)
    with pytest.raises(elmo.errors.ModelFileNotFound, match="expected options.json \\+ weights.hdf5"):
        SeqVecEmbedder(model_directory=tmp_path)
    with pytest.raises(InputError, match="warmup_rounds must be"):
        seqvec(model, warmup_rounds=-1)


@pytest.mark.parametrize("length", [1000, pytest.param(5000, marks=pytest.mark.slow),
                                    pytest.param(35000, marks=pytest.mark.slow)])
def test_long_proteins_in_windows_equal_the_unbatched_computation(model, length):
    rng = np.random.default_rng(length)
    sequence = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=length))
    windowed = seqvec(model, stateful=False, window=512)
    got = windowed.embed(sequence)
    want = elmo.Embedder.from_files(model.options_file, model.weight_file).embed_batch([list(sequence)])[0]
    assert got.shape == (3, length, 32)
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    batch = list(windowed.embed_batch(["PROTEIN", sequence]))  # a long one beside a short one in a batch
    np.testing.assert_allclose(batch[1], want, atol=1e-6, rtol=0)


# FASTA in


@pytest.mark.parametrize("text,message", [
    (">P1\nMKV\n>P2\n\n>P3\nAC\n", r"record 2 \('P2'\): the sequence is empty"),
    (">P1\nMKV\n>P2\nAA\n>P1\nCC\n", r"record 3 \('P1'\): the id is used twice \(first by record 1\)"),
    (">P1\nMKV*\n", r"record 1 \('P1'\): residue 4 is '\*' .* '\*' \(a stop codon\) is no residue: remove it"),
    (">P1\nMKVmk\n", r"residue 4 is 'm' \(characters outside SeqVec's alphabet: 'k', 'm'\).*--uppercase"),
    (">P1\nMK-V\n", r"residue 3 is '-'"),
    (">\nMKV\n", r"record 1 has no id"),
    ("MKVLA\nGGG\n", r"not a FASTA file \(expected a '>ID' header line before any sequence\)"),
    ("", r"no FASTA records"),
])
def test_bad_fasta_is_one_line_naming_the_record(tmp_path, text, message):
    path = tmp_path / "in.fasta"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as error:
        read_fasta(path)
    assert "\n" not in str(error.value) and str(error.value).startswith(str(path))


def test_fasta_alphabet_gzip_binary_and_uppercase(tmp_path):
    proteins = read_fasta(write_fasta(tmp_path / "a.fa", PROTEINS))
    assert [(p.id, p.sequence) for p in proteins] == list(PROTEINS.items())  # X U Z B O are SeqVec's tokens
    with gzip.open(tmp_path / "a.fa.gz", "wt") as f:
        f.write((tmp_path / "a.fa").read_text())
    assert read_fasta(tmp_path / "a.fa.gz") == proteins
    (tmp_path / "bin.fa").write_bytes(b">P1\nMK\xff\xfe\n")
    with pytest.raises(InputError, match="not a FASTA file \\(not UTF-8 text"):
        read_fasta(tmp_path / "bin.fa")
    (tmp_path / "low.fa").write_text(">P1\nmkV\n")
    assert read_fasta(tmp_path / "low.fa", uppercase=True)[0].sequence == "MKV"


# bio_embeddings' files


def test_embed_proteins_writes_bio_embeddings_layout(model, tmp_path):
    fasta = write_fasta(tmp_path / "in.fa", PROTEINS)
    assert main(["embed-proteins", str(fasta), str(tmp_path / "out"), "--options", str(model.options_file),
                 "--weights", str(model.weight_file), "--max-amino-acids", "30"]) == 0
    order = sorted(PROTEINS.items(), key=lambda kv: -len(kv[1]))  # longest first, as bio_embeddings embeds
    expected = seqvec(model).embed_many([s for _, s in order], batch_size=30)  # warm-up, then the same batches
    with h5py.File(tmp_path / "out" / EMBEDDINGS_FILE) as per_residue, \
            h5py.File(tmp_path / "out" / REDUCED_FILE) as per_protein:
        assert set(per_residue) == set(per_protein) == {hashlib.md5(s.encode()).hexdigest() for s in PROTEINS.values()}
        for (pid, sequence), want in zip(order, expected, strict=True):
            key = hashlib.md5(sequence.encode()).hexdigest()
            assert per_residue[key].attrs["original_id"] == per_protein[key].attrs["original_id"] == pid
            np.testing.assert_allclose(per_residue[key][()], want, atol=1e-6, rtol=0)
            np.testing.assert_allclose(per_protein[key][()], want.sum(0).mean(0), atol=1e-6, rtol=0)
    with open(tmp_path / "out" / MAPPING_FILE) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["", "original_id", "sequence_length"] and [r[1] for r in rows[1:]] == [k for k, _ in order]
    assert not (tmp_path / "out" / PROGRESS_FILE).exists()
    again = ["embed-proteins", str(fasta), str(tmp_path / "out"), "--options", str(model.options_file), "--weights",
             str(model.weight_file), "--stateless"]
    assert main(again) == 2 and main([*again, "--overwrite"]) == 0


def test_identical_sequences_are_refused_unless_keyed_by_position(model, tmp_path, capsys):
    fasta = write_fasta(tmp_path / "in.fa", {"A1": "SEQWENCE", "A2": "MKV", "A3": "SEQWENCE"})
    flags = ["--options", str(model.options_file), "--weights", str(model.weight_file)]
    assert main(["embed-proteins", str(fasta), str(tmp_path / "out"), *flags]) == 2
    assert "record 3 ('A3') has the same sequence as record 1 ('A1')" in capsys.readouterr().err
    assert main(["embed-proteins", str(fasta), str(tmp_path / "out"), *flags, "--simple-remapping",
                 "--no-per-residue"]) == 0
    assert not (tmp_path / "out" / EMBEDDINGS_FILE).exists()
    with h5py.File(tmp_path / "out" / REDUCED_FILE) as f:
        assert sorted(f) == ["0", "1", "2"] and f["2"].attrs["original_id"] == "A2"


@pytest.mark.parametrize("stateful", [True, False])
def test_a_stopped_run_resumes_to_the_same_files(model, tmp_path, monkeypatch, stateful):
    fasta = write_fasta(tmp_path / "in.fa", PROTEINS)
    embed_fasta(seqvec(model, stateful=stateful), fasta, tmp_path / "whole", max_amino_acids=12, progress=False)
    calls = {"n": 0}
    real = SeqVecEmbedder.embed_batch

    def stops_on_the_third(self, batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(SeqVecEmbedder, "embed_batch", stops_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        embed_fasta(seqvec(model, stateful=stateful), fasta, tmp_path / "cut", max_amino_acids=12, progress=False)
    assert not (tmp_path / "cut" / REDUCED_FILE).exists() and (tmp_path / "cut" / PROGRESS_FILE).exists()
    monkeypatch.setattr(SeqVecEmbedder, "embed_batch", real)
    embed_fasta(seqvec(model, stateful=stateful), fasta, tmp_path / "cut", max_amino_acids=12, progress=False)
    for name in (EMBEDDINGS_FILE, REDUCED_FILE):
        with h5py.File(tmp_path / "whole" / name) as a, h5py.File(tmp_path / "cut" / name) as b:
            assert sorted(a) == sorted(b)
            for key in a:  # the char CNN's token memo may have met a residue in another batch: float32 rounding
                np.testing.assert_allclose(a[key][()], b[key][()], atol=1e-6, rtol=0)


def test_a_resume_with_other_settings_is_refused(model, tmp_path, monkeypatch):
    fasta = write_fasta(tmp_path / "in.fa", PROTEINS)
    monkeypatch.setattr(SeqVecEmbedder, "embed_batch", lambda self, batch: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        embed_fasta(seqvec(model), fasta, tmp_path / "out", max_amino_acids=12, progress=False)
    assert not (tmp_path / "out" / PROGRESS_FILE).exists()  # nothing written yet: a new run starts afresh
    real_embed = SeqVecEmbedder.embed

    def once(self, batch, calls=[]):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return [real_embed(self, s) for s in batch]

    monkeypatch.setattr(SeqVecEmbedder, "embed_batch", once)
    with pytest.raises(KeyboardInterrupt):
        embed_fasta(seqvec(model), fasta, tmp_path / "out", max_amino_acids=12, progress=False)
    assert (tmp_path / "out" / PROGRESS_FILE).exists()
    with pytest.raises(elmo.errors.OutputError, match="holds an unfinished run with other settings or another FASTA"):
        embed_fasta(seqvec(model), fasta, tmp_path / "out", max_amino_acids=99, progress=False)
