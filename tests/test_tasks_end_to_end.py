"""The commands end to end on slices of the real data with the tiny fixture biLM (D=32)."""

from __future__ import annotations

import json

import pytest
from conftest import ALLENNLP, DATA, need, train_small_vectors

from elmo.cli import main

pytest.importorskip("gensim", reason="the static baseline needs the tasks extra (gensim)")
pytest.importorskip("seqeval", reason="span F1 needs the tasks extra (seqeval)")


pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # end-to-end task runs


@pytest.fixture(scope="module")
def fixture_elmo() -> list[str]:
    need(ALLENNLP)
    return ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> str:
    out = train_small_vectors(tmp_path_factory.mktemp("w2v") / "w2v.bin")
    from elmo.tasks.static import load_vectors
    assert load_vectors(out).vector_size == 16
    return str(out)


SMALL = ["--limit", "24", "--hidden", "16", "--char-filters", "8", "--dropout", "0", "--lr", "0.01", "--batch-size", "8"]


def test_ner_both_arms_and_load_tagger(tmp_path, fixture_elmo, vectors):
    conll = DATA / "conll2003"
    files = ["--train", str(need(conll / "eng.train.gz")), "--dev", str(conll / "eng.testa.gz"),
             "--test", str(conll / "eng.testb.gz")]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    out, model = tmp_path / "elmo.json", tmp_path / "elmo.pt"
    assert main(["task", "train", "ner", *files, *fixture_elmo, *cache, "--static", vectors, "--output-mix",
                 "--epochs", "4", "--patience", "4", *SMALL, "--out", str(out), "--save", str(model)]) == 0
    m = json.loads(out.read_text())
    assert m["arm"] == "elmo" and m["n_train"] == 24 and 0 <= m["test"]["f1"] <= 100
    losses = [h["train_loss"] for h in m["history"]]
    assert losses[-1] < losses[0]
    assert sum(m["scalar_mix"]["input"]["weights"]) == pytest.approx(1, abs=1e-5) and m["scalar_mix"]["output"]
    assert len(list((tmp_path / "cache").glob("*.hdf5"))) == 3  # one cache per split, reused below

    static_out, static_model = tmp_path / "static.json", tmp_path / "static.pt"
    assert main(["task", "train", "ner", *files, "--elmo", "none", *cache, "--static", vectors, "--epochs", "1",
                 "--train-fraction", "0.5", *SMALL, "--out", str(static_out), "--save", str(static_model)]) == 0
    s = json.loads(static_out.read_text())
    assert s["arm"] == "static" and s["n_train"] == 12 and s["scalar_mix"] == {"input": None, "output": None}

    from elmo.tasks import load_tagger
    tokens = ["U.N.", "official", "Ekeus", "heads", "for", "Baghdad", "."]
    with_elmo, without = load_tagger(model), load_tagger(static_model)
    assert with_elmo.uses_elmo and not without.uses_elmo
    labels = set(with_elmo.config.labels)
    for tagger in (with_elmo, without):
        tags = tagger.predict(tokens)
        assert len(tags) == len(tokens) and set(tags) <= labels
    assert with_elmo.layer_weights() == m["scalar_mix"]  # the saved mix, exposed for presets
    parts, static_parts = with_elmo.input_parts(tokens), without.input_parts(tokens)
    assert parts["word"].shape == (len(tokens), 16 + 8) and parts["elmo"].shape == (len(tokens), 32)
    assert list(static_parts) == ["word"] and static_parts["word"].shape == (len(tokens), 16 + 8)


def test_pos_and_sst5_train(tmp_path, fixture_elmo, vectors):
    ud = DATA / "ud_english_ewt"
    out = tmp_path / "pos.json"
    assert main(["task", "train", "pos", "--train", str(need(ud / "en_ewt-ud-dev.conllu.gz")),
                 "--dev", str(ud / "en_ewt-ud-test.conllu.gz"), "--test", str(ud / "en_ewt-ud-test.conllu.gz"),
                 *fixture_elmo, "--cache-dir", str(tmp_path), "--static", vectors, "--epochs", "3", *SMALL,
                 "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["metric"] == "accuracy" and [h["train_loss"] for h in m["history"]][-1] < m["history"][0]["train_loss"]
    trees = DATA / "sst5" / "trees"
    out = tmp_path / "sst.json"
    assert main(["task", "train", "sst5", "--train", str(need(trees / "dev.txt")), "--dev", str(trees / "test.txt"),
                 "--test", str(trees / "test.txt"), *fixture_elmo, "--cache-dir", str(tmp_path), "--static", "none",
                 "--epochs", "3", *SMALL, "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["history"][-1]["train_loss"] < m["history"][0]["train_loss"] and 0 <= m["test"]["accuracy"] <= 100


@pytest.mark.parametrize("layer", [0, 2])
def test_probe_pos(tmp_path, fixture_elmo, layer):
    c = DATA / "conll2000"
    out = tmp_path / "probe.json"
    assert main(["probe", "pos", "--layer", str(layer), "--train", str(need(c / "train.txt.gz")),
                 "--test", str(c / "test.txt.gz"), *fixture_elmo, "--limit", "40", "--epochs", "3",
                 "--cache-dir", str(tmp_path), "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["layer"] == layer and m["n_tokens"]["dev"] > 0 and 0 < m["test"]["accuracy"] <= 100
    assert m["history"][-1]["train_loss"] < m["history"][0]["train_loss"]


def test_probe_wsd(tmp_path, fixture_elmo):
    w = DATA / "wsd_raganato"
    semcor = w / "Training_Corpora" / "SemCor"
    out = tmp_path / "wsd.json"
    args = ["probe", "wsd", "--train-xml", str(need(semcor / "semcor.data.xml.gz")),
            "--train-keys", str(semcor / "semcor.gold.key.txt.gz"),
            "--test-xml", str(w / "Evaluation_Datasets" / "senseval3" / "senseval3.data.xml"),
            "--test-keys", str(w / "Evaluation_Datasets" / "senseval3" / "senseval3.gold.key.txt"),
            "--wordnet", str(need(DATA / "wordnet30" / "dict")), *fixture_elmo, "--limit", "30",
            "--cache-dir", str(tmp_path)]
    assert main([*args, "--layer", "1", "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["test"]["n_answered"] == m["test"]["n_gold"] > 0 and 0 < m["test"]["f1"] <= 100
    assert m["n_first_sense_backoff"] < m["test"]["n_gold"]  # some answers came from SemCor centroids
    assert main([*args, "--layer", "7"]) == 2  # a clear error, not a traceback: the fixture biLM has 3 layers


def test_clear_errors(tmp_path, fixture_elmo, capsys):
    c = DATA / "conll2003"
    base = ["task", "train", "ner", "--train", str(need(c / "eng.testa.gz")), "--dev", str(c / "eng.testa.gz"),
            "--test", str(c / "eng.testb.gz")]
    assert main([*base, "--elmo", "none", "--static", str(tmp_path / "missing.bin")]) == 2
    assert "static vectors not found" in capsys.readouterr().err
    assert main([*base, "--elmo", str(tmp_path)]) == 2
    assert "a model directory needs options.json" in capsys.readouterr().err
    assert main([*base, *fixture_elmo, "--train-fraction", "0", "--limit", "5"]) == 2
    assert "--train-fraction must be in (0, 1]" in capsys.readouterr().err


def test_eval_every_scores_dev_on_schedule_and_after_the_last_epoch(tmp_path, fixture_elmo, capsys):
    trees = DATA / "sst5" / "trees"
    base = ["task", "train", "sst5", "--train", str(need(trees / "dev.txt")), "--dev", str(trees / "test.txt"),
            "--test", str(trees / "test.txt"), *fixture_elmo, "--cache-dir", str(tmp_path), "--static", "none",
            "--limit", "40", *SMALL]
    out = tmp_path / "sst.json"
    assert main([*base, "--epochs", "5", "--eval-every", "2", "--patience", "9", "--out", str(out)]) == 0
    history = json.loads(out.read_text())["history"]
    assert [h["epoch"] for h in history if "dev" in h] == [2, 4, 5]
    assert main([*base, "--eval-every", "0"]) == 2
    assert "--eval-every must be at least 1, found 0" in capsys.readouterr().err


def test_static_vectors_are_the_same_file_on_every_run(tmp_path):
    """One gensim worker by default: the results grid's static vectors can be rebuilt byte for byte.
    3,000 sentences are several of gensim's jobs, where two workers give a different file each run."""
    corpus = need(DATA / "wiki_corpus" / "valid.txt")
    files = [tmp_path / "a.bin", tmp_path / "b.bin"]
    for out in files:
        assert main(["static", "train", str(corpus), "-o", str(out), "--dim", "16", "--min-count", "1",
                     "--epochs", "1", "--max-sentences", "3000"]) == 0
    assert files[0].read_bytes() == files[1].read_bytes()
