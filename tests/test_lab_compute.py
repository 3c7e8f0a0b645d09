"""The lab's computations, checked against plain definitions (no web server needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_lab_support import fixture_files, need_data, write_results, write_test_softmax

from elmo import ScalarMix, load_bilm
from elmo.errors import InputError, ModelFileError
from elmo.lab import corpora
from elmo.lab.inputs import LabInputError, Limits, sentence_tokens, tokenize
from elmo.lab.lm_head import LMHead
from elmo.lab.results import read_results, results_table
from elmo.lab.task_models import load_preset, preset_from_mix
from elmo.lab.trace import char_stages, ngram_text
from elmo.lab.vectors import cluster_purity, pca_2d, purity, softmax_weights, top_k, unit_rows
from elmo.model.chars import token_to_ids
from elmo.tasks.paper import error_reduction


def test_top_k_is_cosine_order():
    table = np.array([[1, 0], [0, 1], [1, 1], [-1, 0]], dtype=np.float32)
    found = top_k(np.array([1.0, 0.1]), unit_rows(table), 3)
    assert [i for i, _ in found] == [0, 2, 1]
    assert found[0][1] == pytest.approx(1 / np.sqrt(1.01), abs=1e-6)


def test_pca_recovers_the_main_axis():
    rng = np.random.default_rng(0)
    x = np.outer(np.linspace(-5, 5, 50), [3.0, 4.0, 0.0]) + rng.normal(scale=0.01, size=(50, 3))
    coords, shares = pca_2d(x)
    assert shares[0] > 0.99
    assert np.corrcoef(coords[:, 0], np.linspace(-5, 5, 50))[0, 1] > 0.999
    assert pca_2d(np.ones((3, 4)))[0].tolist() == [[0, 0]] * 3  # identical points: one spot


def test_purity_definition_and_kmeans_on_separated_clusters():
    assert purity(np.array([0, 0, 1, 1]), ["a", "b", "b", "b"]) == 0.75
    rng = np.random.default_rng(1)
    centres = np.eye(4)[:3] * 10
    x = np.concatenate([c + rng.normal(scale=0.1, size=(20, 4)) for c in centres])
    labels = ["x"] * 20 + ["y"] * 20 + ["z"] * 20
    assert cluster_purity(x, labels) == 1.0
    same = np.tile([1.0, 2.0, 3.0], (10, 1))  # one point for two labels (a static vector): majority share
    assert cluster_purity(same, ["a"] * 7 + ["b"] * 3) == 0.7


def test_softmax_weights_match_scalar_mix():
    w = [0.5, -1.0, 2.0]
    assert np.allclose(softmax_weights(w), ScalarMix(3, initial_scalar_parameters=w).weights().detach().numpy())


def test_tokenizer_and_limits():
    assert tokenize("She went to the bank, didn't she?") == "She went to the bank , didn't she ?".split()
    limits = Limits(max_tokens=5, max_chars=40)
    assert sentence_tokens(["a", "b"], limits) == ["a", "b"]
    with pytest.raises(LabInputError, match="at most 5") as e:
        sentence_tokens("one two three four five six", limits)
    assert e.value.status == 413
    with pytest.raises(LabInputError, match="at most 40"):
        sentence_tokens("x" * 41, limits)
    for bad in ("", "  ", [], [""], [1], None):
        with pytest.raises(LabInputError):
            sentence_tokens(bad, limits)


def test_char_stages_rebuild_the_encoder_exactly():
    options, weights = fixture_files()
    bilm = load_bilm(options, weights)
    tokens = ["bank", "Bank", "é", "x" * 60, "<S>"]
    stages = char_stages(bilm.char_encoder, tokens)
    from elmo import batch_to_ids
    with torch.no_grad():
        expected = bilm.char_encoder(batch_to_ids([tokens])[0])
    assert torch.allclose(stages.projection, expected, atol=1e-5)
    assert stages.cnn.shape == (5, bilm.config.n_filters) and len(stages.widths) == bilm.config.n_filters
    ids = token_to_ids("bank")
    assert ngram_text(ids, 0, 3) == "⟨ba" and ngram_text(ids, 3, 4) == "nk⟩·"
    assert ngram_text(token_to_ids("é"), 1, 2) == "é"  # two UTF-8 bytes shown as one character


def test_lm_head_is_a_full_softmax(tmp_path):
    fixture_files()
    vocab, softmax = write_test_softmax(tmp_path)
    head = LMHead.from_files(vocab, softmax, projection_dim=16)
    h = np.random.default_rng(2).normal(size=(2, 16)).astype(np.float32)
    out = head.predict(h, ["the", "zzz-not-a-word"], k=3)
    logits = h @ head.weight.T + head.bias
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert [t["word"] for t in out[0]["top"]] == [head.vocab[i] for i in np.argsort(-p[0])[:3]]
    assert out[0]["top"][0]["p"] == pytest.approx(p[0].max(), abs=1e-5)
    assert out[0]["target_p"] == pytest.approx(p[0, head.index["the"]], abs=1e-6)
    assert out[1]["in_vocab"] is False and out[1]["target_p"] == pytest.approx(p[1, head.index["<UNK>"]], abs=1e-6)
    with pytest.raises(ModelFileError, match=r"expected \(\d+, 32\)"):
        LMHead.from_files(vocab, softmax, projection_dim=32)
    (tmp_path / "short.txt").write_text("<S>\n</S>\n<UNK>\n")
    with pytest.raises(ModelFileError, match=r"expected \(3, 16\) and \(3,\) for this vocabulary"):
        LMHead.from_files(tmp_path / "short.txt", softmax, projection_dim=16)


def test_presets_from_the_shapes_task_code_writes(tmp_path):
    learned = {"scalar_mix": {"input": {"weights": [0.2, 0.3, 0.5], "gamma": 1.7}, "output": None}}
    p = preset_from_mix("NER", learned)
    assert np.allclose(softmax_weights(list(p.scalar_parameters)), [0.2, 0.3, 0.5]) and p.gamma == 1.7
    mix = ScalarMix(3, initial_scalar_parameters=[1.0, 0.0, -1.0])
    assert preset_from_mix("x", mix).scalar_parameters == (1.0, 0.0, -1.0)
    (tmp_path / "metrics.json").write_text(json.dumps(learned))
    assert load_preset("POS", tmp_path).gamma == 1.7
    assert load_preset("POS", tmp_path / "metrics.json").name == "POS"
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(InputError, match="no learned mix"):
        load_preset("X", tmp_path / "empty.json")
    with pytest.raises(InputError, match="no such file"):
        load_preset("X", tmp_path / "missing")


def test_results_table_computes_gains_and_says_why(tmp_path):
    assert error_reduction(81.1, 85.8) == pytest.approx(24.87, abs=0.01)  # the paper's SQuAD 24.9%
    ours, why = read_results(write_results(tmp_path / "results.json"))
    rows = {r["name"]: r for r in results_table(ours, why, None)}
    assert [r for r in rows][:6] == ["SQuAD", "SNLI", "SRL", "Coref", "NER", "SST-5"]
    assert rows["SQuAD"]["paper"]["error_reduction"] == 24.9 and "no SQuAD data" in rows["SQuAD"]["why"]
    assert rows["NER"]["ours"]["error_reduction"] == 20.0 and rows["NER"]["ours"]["increase"] == 4.0
    assert rows["SST-5"]["why"] == "not run: test says so"
    assert rows["POS"]["extra"] and rows["POS"]["paper"] is None
    none_rows = results_table(*read_results(None), None)
    assert "not available yet" in none_rows[4]["why"]
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(InputError, match="benchmarks"):
        read_results(tmp_path / "bad.json")


def test_results_from_the_task_runs_metrics_files(tmp_path):
    def run(task, arm, seed, score, fraction=1.0, metric="f1"):
        m = {"task": task, "arm": arm, "seed": seed, "train_fraction": fraction, "metric": metric,
             "test": {metric: score, "precision": 0.0}}
        (tmp_path / f"{task}-{arm}-{fraction:g}-s{seed}.json").write_text(json.dumps(m))

    for seed, (b, e) in enumerate([(80.0, 84.0), (82.0, 86.0)], 1):
        run("ner", "static", seed, b)
        run("ner", "elmo", seed, e)
    run("ner", "elmo", 1, 10.0, fraction=0.01)  # the low-resource curve is not Table 1
    run("sst5", "elmo", 1, 50.0, metric="accuracy")  # no baseline yet
    (tmp_path / "broken.json").write_text("{")
    ours, why = read_results(tmp_path)
    assert why == "" and list(ours) == ["NER"]
    assert ours["NER"] | {"note": ""} == {"metric": "f1", "baseline": 81.0, "elmo": 85.0, "baseline_std": 1.41,
                                          "elmo_std": 1.41, "note": ""}
    rows = {r["name"]: r for r in results_table(ours, why, None)}
    assert rows["NER"]["ours"]["error_reduction"] == pytest.approx(100 * 4 / 19, abs=0.05)
    assert rows["SST-5"]["why"] == "not available yet: no measured result for SST-5"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert read_results(empty)[1].startswith("not available yet: no finished runs")


def test_results_from_the_report_table(tmp_path):
    report = tmp_path / "results.md"
    report.write_text("""# Results

| task | paper baseline | paper +ELMo | paper RER | ours: static | ours: +ELMo | ours: RER |
| --- | --- | --- | --- | --- | --- | --- |
| NER (CoNLL-2003 test, span F1) | 90.15 | 92.22 ± 0.10 | 21% | 85.10 ± 0.30 | 87.02 ± 0.21 | 12.9% |
| POS (UD EWT test, UPOS accuracy) | — | — | — |  |  |  |
| SST-5 (test, accuracy) | 51.4 | 54.7 ± 0.5 | 6.8% | 40.00 (1 seed) | 42.50 (1 seed) | 4.2% |

| probe | layer | paper biLM | ours |
| --- | --- | --- | --- |
| POS, UD EWT (UPOS), accuracy | 1 | — | 93.1 |
""", encoding="utf-8")
    ours, why = read_results(report)
    assert why == "" and sorted(ours) == ["NER", "SST-5"]
    assert ours["NER"]["elmo"] == 87.02 and ours["NER"]["elmo_std"] == 0.21 and ours["NER"]["metric"] == "span F1"
    assert ours["SST-5"]["baseline"] == 40.0 and "baseline_std" not in ours["SST-5"]
    text = report.read_text().replace("85.10 ± 0.30 | 87.02 ± 0.21", " | ")
    report.write_text(text.replace("40.00 (1 seed) | 42.50 (1 seed)", " | "))
    assert read_results(report) == ({}, "not available yet: results.md has no measured numbers yet")


def test_corpus_readers_take_real_labelled_sentences():
    data = need_data()
    ewt = corpora.ewt_sentences(data, 50)
    assert ewt and all(len(s.tokens) == len(s.upos) for s in ewt) and "NOUN" in {u for s in ewt for u in s.upos}
    sem = corpora.semcor_sentences(data, 2)
    keys = [k for s in sem for k in s.senses if k]
    assert all(keys.count(k) <= 2 for k in keys) and len(set(keys)) == 2 * len(corpora.SENSE_WORDS)
    for s in sem:
        for t, k in zip(s.tokens, s.senses):
            assert not k or t.lower().startswith(k.split("%")[0][:3])  # the sense sits on its word
    glosses = corpora.wordnet_glosses(data, {"bank%1:17:01::"})
    assert glosses["bank%1:17:01::"].startswith("sloping land")
