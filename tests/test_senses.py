"""The hand-written homonym sets and the sense-margin arithmetic (scripts/sense_check.py).

Only the machinery: the sets obey the issue's rules, and the margin is right on vectors whose answer
is known by hand. Whether the bundled model reaches 80% is measured by the script, not asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import load_script

from elmo.tasks.contextuality import (
    Occurrence,
    margins_from_vectors,
    read_sense_set,
    sense_margins,
    separation_summary,
)

DATA = Path(__file__).resolve().parent / "data"
SETS = {"check": DATA / "homonyms.json", "heldout": DATA / "homonyms_heldout.json"}
MIN_WORDS, MIN_PER_SENSE = 15, 3  # the "Must show"


@pytest.fixture(scope="module", params=sorted(SETS))
def raw(request) -> dict:
    return json.loads(SETS[request.param].read_text(encoding="utf-8"))


def test_set_has_enough_words_each_with_two_senses_and_enough_sentences(raw):
    words = [entry["word"] for entry in raw["words"]]
    assert len(words) >= MIN_WORDS and len(set(words)) == len(words)
    for entry in raw["words"]:
        senses = [sense["sense"] for sense in entry["senses"]]
        assert len(senses) == 2 and senses[0] != senses[1], entry["word"]
        for sense in entry["senses"]:
            assert len(sense["sentences"]) >= MIN_PER_SENSE, (entry["word"], sense["sense"])


def test_target_word_is_at_its_index_and_occurs_once(raw):
    for entry in raw["words"]:
        for sense in entry["senses"]:
            for item in sense["sentences"]:
                tokens = item["sentence"].split()
                assert tokens[item["index"]] == entry["word"], item
                assert tokens.count(entry["word"]) == 1, item


def test_sentences_are_distinct_and_tokenized_like_the_corpus(raw):
    sentences = [item["sentence"] for e in raw["words"] for s in e["senses"] for item in s["sentences"]]
    assert len(set(sentences)) == len(sentences)
    for sentence in sentences:
        assert sentence == " ".join(sentence.split()), sentence  # single spaces, no stray whitespace
        assert sentence.split()[-1] in {".", "?", "!"}, sentence  # final punctuation split off
        assert "'" not in sentence.replace(" 's ", " "), sentence  # possessive split, no contractions


def test_the_two_sets_share_no_word_and_no_sentence():
    loaded = {name: read_sense_set(path) for name, path in SETS.items()}
    assert not loaded["check"].keys() & loaded["heldout"].keys()
    sentences = {name: {" ".join(o.tokens) for occ in sets.values() for o in occ} for name, sets in loaded.items()}
    assert not sentences["check"] & sentences["heldout"]


def test_read_sense_set_gives_occurrences_and_rejects_a_wrong_index(tmp_path):
    occurrences = read_sense_set(SETS["check"])
    bank = occurrences["bank"]
    assert {o.sense for o in bank} == {"financial institution", "side of a river"}
    assert all(o.tokens[o.position] == "bank" for o in bank)
    bad = {"words": [{"word": "bat", "senses": [{"sense": "animal", "sentences": [
        {"index": 0, "sentence": "A bat flew by ."}]}]}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="not token 0"):
        read_sense_set(path)


def _layers(*rows):
    """One occurrence's (layers, D) array from its per-layer vectors."""
    return np.array(rows, dtype=np.float64)


def test_margin_on_hand_made_vectors():
    """Layer 0 identical everywhere (margin 0); layer 1 as worked out by hand in the comments."""
    x, y, xy = [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]
    vectors = {
        # same-sense pairs cos 1, 1; different-sense pairs all cos 0 -> margin 1 - 0 = 1
        "apart": [("a", _layers(x, x)), ("a", _layers(x, x)), ("b", _layers(x, y)), ("b", _layers(x, y))],
        # same-sense pairs cos 0, 0; different 1, 0, 0, 1 -> margin 0 - 0.5 = -0.5
        "crossed": [("a", _layers(x, x)), ("a", _layers(x, y)), ("b", _layers(x, x)), ("b", _layers(x, y))],
        # same (1/sqrt2 + 1) / 2; different 0, 0, 1/sqrt2, 1/sqrt2 -> (1/sqrt2 + 1)/2 - 1/(2 sqrt2) = 0.5
        "tilted": [("a", _layers(x, x)), ("a", _layers(x, xy)), ("b", _layers(x, y)), ("b", _layers(x, y))],
    }
    result = margins_from_vectors(vectors)
    assert result["words"] == 3 and sorted(result["layers"]) == [0, 1]
    assert result["layers"][0]["per_word"] == pytest.approx({"apart": 0.0, "crossed": 0.0, "tilted": 0.0}, abs=1e-12)
    assert result["layers"][1]["per_word"] == pytest.approx({"apart": 1.0, "crossed": -0.5, "tilted": 0.5})
    assert result["layers"][1]["mean_margin"] == pytest.approx(1 / 3)
    summary = separation_summary(result)
    assert summary[0]["separating"] == 0 and summary[0]["not_separating"] == ["apart", "crossed", "tilted"]
    assert summary[1] == {"separating": 2, "words": 3, "fraction": pytest.approx(2 / 3),
                          "mean_margin": pytest.approx(1 / 3), "not_separating": ["crossed"]}


def test_sense_margins_reads_the_target_token_of_each_sentence(one_thread):
    """Through a real (random-weight) biLM: layer 0 is context-free, so the same word gives margin 0;
    a wrong position would pick other words and break that."""
    from elmo.embed.embedder import Embedder
    from elmo.formats.weights import load_bilm
    from elmo.models import resolve

    torch.manual_seed(0)
    embedder = Embedder(load_bilm(resolve("default").original_files().options_file, None))
    occurrences = {word: [Occurrence(word, sense, sentence.split(), sentence.split().index(word))
                          for sense, sentence in items]
                   for word, items in {
                       "bank": [("money", "The bank raised its rates ."), ("money", "I called my bank today ."),
                                ("river", "Ducks sat on the bank ."), ("river", "The grassy bank was wet .")],
                       "bat": [("animal", "A bat flew past ."), ("animal", "The bat slept all day ."),
                               ("sport", "He swung the bat hard ."), ("sport", "My new bat is wooden .")],
                   }.items()}
    result = sense_margins(embedder, occurrences)
    assert sorted(result["layers"]) == [0, 1, 2]
    assert result["layers"][0]["per_word"] == pytest.approx({"bank": 0.0, "bat": 0.0}, abs=1e-6)
    assert all(abs(m) > 1e-6 for m in result["layers"][1]["per_word"].values())


def test_lab_examples_read_each_preset_word_in_its_own_sentences(one_thread):
    """scripts/sense_check.py --lab-examples: one line per preset word and layer; layer 0 gives the same
    vector in every sentence (distance 0), the LSTM layers do not."""
    from elmo.embed.embedder import Embedder
    from elmo.formats.weights import load_bilm
    from elmo.lab.examples import AMBIGUOUS
    from elmo.models import resolve

    script = load_script("scripts/sense_check.py")
    torch.manual_seed(0)
    lines = script.lab_examples(Embedder(load_bilm(resolve("default").original_files().options_file, None)))
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], int(r[1])) for r in rows] == [(w, layer) for w in AMBIGUOUS for layer in range(3)]
    assert all(float(r[2]) == 0 and float(r[3]) == 0 and r[4] == "no" for r in rows if r[1] == "0")
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows if r[1] != "0")
