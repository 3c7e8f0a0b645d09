"""The bundled default model: loads by name everywhere, and its model card's figures hold."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from conftest import DATA, REPO, need

from elmo import Elmo, Embedder, batch_to_ids
from elmo.cli import main as cli_main
from elmo.lab.examples import AMBIGUOUS
from elmo.lab.inputs import tokenize
from elmo.lab.panels_words import sense_distances
from elmo.models import bundled_models, resolve
from elmo.tasks.contextuality import read_sense_set, sense_margins, separation_summary

CARD = REPO / "docs" / "model-card.json"
pytestmark = pytest.mark.skipif("default" not in bundled_models(), reason="no bundled default model in this checkout")


@pytest.fixture(scope="module")
def card() -> dict:
    return json.loads(CARD.read_text())


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def test_default_model_loads_by_name_everywhere(tmp_path, embedder):
    sentence = ["The", "bank", "raised", "rates", "."]
    vectors = embedder.embed_sentence(sentence)
    assert vectors.shape[:2] == (3, 5)
    elmo = Elmo.from_pretrained("default", num_output_representations=1, dropout=0.0)
    rep = elmo(batch_to_ids([sentence]))["elmo_representations"][0]
    assert rep.shape == (1, 5, vectors.shape[2])
    src, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    src.write_text(" ".join(sentence) + "\n", encoding="utf-8")
    assert cli_main(["embed", str(src), str(out)]) == 0  # no model arguments: the bundled model
    with h5py.File(out, "r") as f:
        np.testing.assert_allclose(f["0"][...], vectors, atol=1e-6)


def test_model_files_fit_the_size_budget():
    files = resolve("default").original_files()
    total = sum(p.stat().st_size for p in files.options_file.parent.iterdir())
    assert total < 42e6, f"bundled model is {total / 1e6:.1f} MB"
    assert files.vocab_file is not None and files.softmax_file is not None


def test_card_says_how_the_weights_are_stored_and_they_load_as_float32(card):
    """Issue #25 allows float16 files when loading gives float32 and the card says which is on disk."""
    from elmo.training.perplexity import load_for_scoring

    directory = resolve("default").original_files().options_file.parent
    for path in sorted(directory.glob("*.hdf5")):
        kinds: set[str] = set()
        with h5py.File(path, "r") as f:
            f.visititems(lambda _, obj, kinds=kinds: kinds.add(str(obj.dtype)) if isinstance(obj, h5py.Dataset) else None)
        assert card["stored_dtypes"][path.name] == sorted(kinds), path.name
    lm, _ = load_for_scoring("default")  # the biLM and its softmax
    assert {p.dtype for p in lm.parameters()} == {torch.float32}


@pytest.mark.slow  # end-to-end on the bundled model's corpus
def test_perplexity_on_a_test_slice_matches_the_card(card, tmp_path):
    from elmo.training.perplexity import load_for_scoring, perplexity

    key = next(k for k in card["perplexity"] if k.startswith("test_first_"))
    lines = int(key.split("_")[2])
    test = need(DATA / "wiki_corpus" / "test.txt")
    part = tmp_path / "slice.txt"
    with open(test, encoding="utf-8") as f:
        part.write_text("".join(next(f) for _ in range(lines)), encoding="utf-8")
    lm, vocab = load_for_scoring("default")
    got = perplexity(lm, vocab, str(part), mode="sentence")
    expected = card["perplexity"][key]
    assert got["tokens"] == expected["tokens"]
    for direction in ("forward", "backward", "average"):
        assert got[direction] == pytest.approx(expected[direction], rel=1e-4), direction


@pytest.mark.slow  # end-to-end on the bundled model's corpus
def test_senses_separate_in_layers_1_and_2_not_in_layer_0(card, embedder):
    """The seed's "bank" demonstration, measured on SemCor: >= 20 ambiguous words, >= 2 sentences per sense."""
    from elmo.tasks.contextuality import sense_margins, sense_occurrences

    semcor = need(DATA / "wsd_raganato" / "Training_Corpora" / "SemCor")
    occurrences = sense_occurrences(str(semcor / "semcor.data.xml.gz"), str(semcor / "semcor.gold.key.txt.gz"))
    assert len(occurrences) >= 20
    for occ in occurrences.values():
        senses = {o.sense for o in occ}
        assert len(senses) == 2 and all(sum(o.sense == s for o in occ) >= 2 for s in senses)
    result = sense_margins(embedder, occurrences)
    layers = result["layers"]
    assert abs(layers[0]["mean_margin"]) < 1e-5  # same word, same vector: layer 0 cannot separate senses
    for layer in (1, 2):
        assert layers[layer]["mean_margin"] > 0, layer
        assert layers[layer]["positive"] > len(occurrences) / 2, layer
    for layer in (0, 1, 2):  # the card reports exactly what this computes
        assert layers[layer]["mean_margin"] == pytest.approx(card["contextuality"]["layers"][str(layer)]["mean_margin"],
                                                             abs=1e-5)
    word = next(iter(occurrences))
    with torch.no_grad():
        first = embedder.embed_sentence(occurrences[word][0].tokens)[0, occurrences[word][0].position]
        last = embedder.embed_sentence(occurrences[word][-1].tokens)[0, occurrences[word][-1].position]
    np.testing.assert_allclose(first, last, atol=1e-5)


# Issue #25's targets. The bundled v3 model (docs/model-card.md) meets perplexity, the held-out
# homonym set and the "bank" example; it misses the SemCor count (45 and 48 of 57 words) and the first
# homonym set at layer 1 (9 of 18) and layer 2 (14 of 18). Strict, so a later model that meets a
# target fails here until its marker goes.
TARGET_MISSED = pytest.mark.xfail(strict=True, reason="issue #25's target; the bundled v3 model misses it")


def test_card_perplexity_meets_the_target(card):
    """Full softmax, every test sentence from zero state, both directions averaged: <= 100."""
    assert card["perplexity"]["test"]["average"] <= 100


@TARGET_MISSED
def test_semcor_senses_separate_for_50_of_57_words(card):
    """The card's SemCor margins (checked against a fresh computation above) positive for >= 50 words."""
    for layer in ("1", "2"):
        assert card["contextuality"]["layers"][layer]["positive"] >= 50, layer


@pytest.mark.parametrize("name", [pytest.param("homonyms.json", marks=TARGET_MISSED), "homonyms_heldout.json"])
def test_hand_written_homonyms_separate_in_layers_1_and_2(embedder, name):
    """Same-sense occurrences closer than different-sense ones for >= 80% of the words, on sentences
    written for this check, none from SemCor; the held-out set guards against tuning to one."""
    summary = separation_summary(sense_margins(embedder, read_sense_set(REPO / "tests" / "data" / name)))
    for layer in (1, 2):
        assert summary[layer]["words"] >= 15
        assert summary[layer]["fraction"] >= 0.8, (layer, summary[layer]["not_separating"])


def test_the_readmes_bank_example_separates_senses_in_layer_2(embedder):
    """The lab's first example: "bank" by the river and "bank" for money further apart than within a sense."""
    senses = [sense for sense, _ in AMBIGUOUS["bank"]]
    sentences = [tokenize(text) for _, text in AMBIGUOUS["bank"]]
    vectors = np.stack([array[2, tokens.index("bank")]
                        for array, tokens in zip(embedder.embed_sentences(sentences), sentences)])
    distances = sense_distances(vectors, senses)
    assert distances["between"] > distances["within"], distances
