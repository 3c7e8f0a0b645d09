"""Ray Data (elmo.integrations.ray, `elmo embed-dataset`) on a local cluster on 127.0.0.1: every vector equals
`elmo embed`'s for the same line (1e-6), every id appears exactly once, a rerun skips what was written."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray loads: a local node's address is 127.0.0.1
ray = pytest.importorskip("ray", reason="Ray Data is the [ray] extra")
pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from elmo.cli import main  # noqa: E402
from elmo.errors import InputError  # noqa: E402
from elmo.integrations.ray import ElmoBatchEmbedder, read_vectors  # noqa: E402
from elmo.integrations.ray_dataset import DatasetSettings, embed_dataset  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster starts in seconds, its actors load torch

LINES = ["The Second Hungarian Republic was a parliamentary republic .", "",
         "It was succeeded by the People 's Republic .",
         "From September 1944 until April 1945 , the Red Army occupied Hungary .", "Budapest", "a b c d e f g h i j",
         "Neither the Western Allies nor the Soviet Union supported any changes .",
         "x " * 600]  # > 512 tokens: long-line windows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The lines as text, and `elmo embed`'s vectors for them (parts of 4 lines, as the runs below): all layers per
    token, and the mean-pooled average."""
    folder = tmp_path_factory.mktemp("ray")
    text = folder / "lines.txt"
    text.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert main(["embed", str(text), str(folder / "all.hdf5"), "--threads", "1", "--part-lines", "4"]) == 0
    assert main(["embed", str(text), str(folder / "pooled.hdf5"), "--average", "--pool", "mean", "--threads", "1",
                 "--part-lines", "4"]) == 0
    with h5py.File(folder / "all.hdf5") as f_all, h5py.File(folder / "pooled.hdf5") as f_pooled:
        expected = {n: (f_all[str(n)][()], f_pooled[str(n)][()]) for n in range(len(LINES))}
    return folder, text, expected


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             logging_level="warning")
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def read_output(folder) -> pa.Table:
    return pa.concat_tables([pq.read_table(folder / name) for name in sorted(os.listdir(folder))
                             if name.startswith("part-")])


def by_id(table: pa.Table) -> dict:
    return dict(zip(table.column("id").to_pylist(), read_vectors(table)))


def test_batch_embedder_is_elmo_embed_without_a_cluster(corpus):
    _, _, expected = corpus
    embedder = ElmoBatchEmbedder(None, threads=1)
    pooling = ElmoBatchEmbedder(None, threads=1, output_format="average", pool="mean")
    out, pooled = {"id": [], "elmo": []}, {"elmo": []}
    for start in (0, 4):  # the batches elmo embed --part-lines 4 runs
        batch = {"id": np.arange(start, start + 4), "text": np.array(LINES[start : start + 4], dtype=object)}
        got = embedder(dict(batch))
        out["id"] += list(got["id"])
        out["elmo"] += list(got["elmo"])
        pooled["elmo"] += list(pooling(dict(batch))["elmo"])
        embedder.embedder.bilm.token_cache.clear()
        pooling.embedder.bilm.token_cache.clear()
    assert out["id"] == list(range(len(LINES)))
    assert np.stack(pooled["elmo"]).shape == (len(LINES), expected[0][1].shape[0])
    for n in range(len(LINES)):
        np.testing.assert_allclose(out["elmo"][n], expected[n][0], atol=1e-6, rtol=0)
        np.testing.assert_allclose(pooled["elmo"][n], expected[n][1], atol=1e-6, rtol=0)


def test_batch_embedder_int8_top_max_is_elmo_embeds(corpus):
    """int8, --top and --pool max, as `elmo embed --int8 --top --pool max` stores them."""
    folder, text, _ = corpus
    assert main(["embed", str(text), str(folder / "int8.hdf5"), "--int8", "--top", "--pool", "max", "--threads", "1",
                 "--part-lines", "4"]) == 0
    embedder = ElmoBatchEmbedder(None, threads=1, int8=True, output_format="top", pool="max")
    got = []
    for start in (0, 4):
        embedder.embedder.bilm.token_cache.clear()  # as elmo embed starts each part
        got += list(embedder({"text": np.array(LINES[start : start + 4], dtype=object)})["elmo"])
    with h5py.File(folder / "int8.hdf5") as f:
        for n, vector in enumerate(got):
            np.testing.assert_allclose(vector, f[str(n)][()], atol=1e-6, rtol=0)


def test_batch_embedder_refuses_bad_rows():
    embedder = ElmoBatchEmbedder(None, threads=1, tokens_column="tokens")
    with pytest.raises(InputError, match="column 'tokens', row 1: expected a list of token strings, found str"):
        embedder({"tokens": np.array([["a"], "b c"], dtype=object)})
    with pytest.raises(InputError, match="no column 'tokens'"):
        embedder({"text": np.array(["a"])})


def test_map_batches_on_a_local_cluster(corpus, cluster):
    """The callable class as users write it: the id kept, per-token layers as a variable-shaped tensor column (the
    pooled, fixed-shape column: the parts below), `elmo embed`'s vectors."""
    _, _, expected = corpus
    ds = ray.data.from_items([{"id": n, "text": line} for n, line in enumerate(LINES)], override_num_blocks=2)
    rows = ds.map_batches(ElmoBatchEmbedder, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1,
                          batch_size=4).take_all()  # 2 blocks of 4 rows: elmo embed --part-lines 4's batches
    assert sorted(row["id"] for row in rows) == list(range(len(LINES)))
    for row in rows:
        assert row["text"] == LINES[row["id"]]
        np.testing.assert_allclose(row["elmo"], expected[row["id"]][0], atol=1e-6, rtol=0)


def test_embed_dataset_exact_once_and_resumed(corpus, cluster, tmp_path):
    _, text, expected = corpus
    out = tmp_path / "out"
    settings = DatasetSettings(part_rows=4)
    summary = embed_dataset(str(text), str(out), settings, actors=2, progress=False)
    assert summary["parts"] == 2 and summary["rows"] == len(LINES)
    table = read_output(out)
    assert sorted(table.column("id").to_pylist()) == list(range(len(LINES)))  # every id exactly once
    for n, vectors in by_id(table).items():
        np.testing.assert_allclose(vectors, expected[n][0], atol=1e-6, rtol=0)
    # a crash: one part never renamed (its temporary file left), another lost; the rerun redoes only that one
    kept = {"part-000000.parquet": os.stat(out / "part-000000.parquet").st_mtime_ns}
    os.remove(out / "part-000001.parquet")
    (out / ".part-000001.parquet.abc.parquet.tmp").write_bytes(b"half a part")
    again = embed_dataset(str(text), str(out), settings, actors=2, progress=False)
    assert again["parts_skipped"] == 1 and again["rows"] == 4
    assert {name: os.stat(out / name).st_mtime_ns for name in kept} == kept
    assert sorted(os.listdir(out)) == ["_elmo_dataset.json", "part-000000.parquet", "part-000001.parquet"]
    assert sorted(read_output(out).column("id").to_pylist()) == list(range(len(LINES)))
    assert json.loads((out / "_elmo_dataset.json").read_text())["complete"] is True
    with pytest.raises(InputError, match="other settings"):
        embed_dataset(str(text), str(out), DatasetSettings(part_rows=4, pool="mean"), actors=1, progress=False)


def test_jsonl_tokens_and_parquet_ids_pooled(corpus, cluster, tmp_path):
    _, _, expected = corpus
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps({"key": f"k{n}", "tokens": line.split()}) + "\n"
                             for n, line in enumerate(LINES)))
    settings = DatasetSettings(tokens_column="tokens", id_column="key", output_format="average", pool="mean",
                               part_rows=4)
    embed_dataset(str(jsonl), str(tmp_path / "from_jsonl"), settings, actors=2, progress=False)
    table = read_output(tmp_path / "from_jsonl")
    assert sorted(table.column("key" if "key" in table.column_names else "id").to_pylist()) == sorted(
        f"k{n}" for n in range(len(LINES)))
    vectors = by_id(table)
    for n in range(len(LINES)):
        np.testing.assert_allclose(vectors[f"k{n}"], expected[n][1], atol=1e-6, rtol=0)
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"sid": list(range(100, 100 + len(LINES))), "text": LINES}), parquet, row_group_size=2)
    # row groups of 2 make parts of 4 rows
    embed_dataset(str(parquet), str(tmp_path / "from_parquet"),
                  DatasetSettings(id_column="sid", output_format="average", pool="mean", part_rows=4), actors=1,
                  progress=False)
    table = read_output(tmp_path / "from_parquet")
    vectors = by_id(table)
    assert sorted(vectors) == list(range(100, 100 + len(LINES)))
    for n in range(len(LINES)):
        np.testing.assert_allclose(vectors[100 + n], expected[n][1], atol=1e-6, rtol=0)


def test_a_bad_row_is_one_clear_error(cluster, tmp_path):
    """An error inside an actor comes back as the package's own one line, through Ray's wrappers."""
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"text": "fine"}\n{"words": "no text key"}\n')
    with pytest.raises(InputError, match=r"rows.jsonl, line 2: no key 'text' \(its keys: words\)"):
        embed_dataset(str(jsonl), str(tmp_path / "out"), DatasetSettings(part_rows=4), actors=1, progress=False)


PROTEIN_MODEL = {"lstm": {"use_skip_connections": True, "projection_dim": 16, "cell_clip": 3, "proj_clip": 3, "dim": 32,
                          "n_layers": 2},
                 "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 2,
                              "embedding": {"dim": 4}, "n_characters": 262, "max_characters_per_token": 50}}


def test_fasta_records_are_rows_of_residues(cluster, tmp_path):
    """A proteome on Ray: one row per record (its id, its residues one a token), read by the proteins code's
    reader; the vectors are its stateless SeqVec vectors and the Embedder's for the same residues; each id once."""
    pytest.importorskip("Bio", reason="FASTA is read by Biopython, the [proteins] extra")
    import gzip

    import elmo
    from elmo.proteins import SeqVecEmbedder, write_random_model

    model = write_random_model(tmp_path / "model", PROTEIN_MODEL, seed=1)
    proteins = {"P1": "MKTAYIAKQRQISFVKSHFSRQ", "P2": "SEQWENCE", "P3": "PROTEIN", "P4": "MKV",
                "P5": "ACDEFGHIKLMNPQRSTVWYUOBZX"}
    fasta = tmp_path / "proteome"
    fasta.mkdir()
    records = [f">{k} a description\n{s[:10]}\n{s[10:]}\n" for k, s in proteins.items()]
    (fasta / "a.fasta").write_text("".join(records[:3]))
    with gzip.open(fasta / "b.fa.gz", "wt") as f:
        f.write("".join(records[3:]))
    settings = DatasetSettings(model=str(tmp_path / "model"), part_rows=2)
    summary = embed_dataset(str(fasta), str(tmp_path / "out"), settings, actors=2, progress=False)
    assert summary["parts"] == 3 and summary["rows"] == len(proteins)
    table = read_output(tmp_path / "out")
    assert sorted(table.column("id").to_pylist()) == sorted(proteins)  # every id exactly once
    assert dict(zip(table.column("id").to_pylist(), table.column("residues").to_pylist())) == {
        k: list(s) for k, s in proteins.items()}
    seqvec = SeqVecEmbedder(options_file=model.options_file, weights_file=model.weight_file, stateful=False)
    plain = elmo.Embedder.from_files(model.options_file, model.weight_file)
    for key, vectors in by_id(table).items():
        np.testing.assert_allclose(vectors, seqvec.embed(proteins[key]), atol=1e-6, rtol=0)
        np.testing.assert_allclose(vectors, plain.embed_batch([list(proteins[key])])[0], atol=1e-6, rtol=0)
    (fasta / "c.faa").write_text(">P2 again\nMKV\n")
    with pytest.raises(InputError, match=r"c.faa: record 1 \('P2'\): the id is used by .*a.fasta too"):
        embed_dataset(str(fasta), str(tmp_path / "out2"), settings, progress=False)
    (fasta / "c.faa").write_text(">P9\nmkv\n")
    with pytest.raises(InputError, match=r"c.faa: record 1 \('P9'\): residue 1 is 'm'"):
        embed_dataset(str(fasta), str(tmp_path / "out2"), settings, progress=False)
    with pytest.raises(InputError, match="a FASTA row's id is its record's id"):
        embed_dataset(str(fasta), str(tmp_path / "out2"), DatasetSettings(id_column="key"), progress=False)
