"""Task data readers on the real files (a few sentences each) and on malformed input."""

from __future__ import annotations

import gzip

import pytest
from conftest import DATA, need

from elmo.errors import InputError
from elmo.tasks.readers import (
    iob1_to_iob2,
    parse_sentiment_tree,
    read_conll2000,
    read_conll2003,
    read_conllu,
    read_sst,
    read_task_file,
)
from elmo.tasks.wsd_data import WordNetSenses, first_sense_answers, read_gold_keys, read_raganato_xml, score_wsd


def test_iob1_to_iob2():
    # I- starts an entity after O or another type; B- separates two adjacent entities of one type.
    assert iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG", "B-MISC"]) == \
        ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG", "B-MISC"]
    assert iob1_to_iob2(["O", "O"]) == ["O", "O"]
    with pytest.raises(ValueError):
        iob1_to_iob2(["X-PER"])


def test_conll2003_real_file():
    examples = read_conll2003(need(DATA / "conll2003" / "eng.testb.gz"))
    assert len(examples) == 3453  # the README's count, -DOCSTART- skipped
    first = examples[0]
    assert first.tokens[:4] == ["SOCCER", "-", "JAPAN", "GET"]
    assert first.tags[:4] == ["O", "O", "B-LOC", "O"]
    assert not any(t.startswith("I-") and (i == 0 or s.tags[i - 1] == "O")
                   for s in examples for i, t in enumerate(s.tags))  # valid IOB2 everywhere


def test_conll2003_entity_count_preserved():
    pytest.importorskip("seqeval", reason="counting entities needs the tasks extra (seqeval): pip install -e '.[tasks]'")
    from seqeval.metrics.sequence_labeling import get_entities
    examples = read_conll2003(need(DATA / "conll2003" / "eng.testa.gz"))
    assert len(get_entities([e.tags for e in examples])) == 5942  # README: all entities in testa


def test_conll2000_and_conllu_and_sst_real_files():
    c = read_conll2000(need(DATA / "conll2000" / "test.txt.gz"))
    assert len(c) == 2012 and c[0].tokens[:3] == ["Rockwell", "International", "Corp."] and c[0].tags[:3] == ["NNP"] * 3
    u = read_conllu(need(DATA / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz"))
    assert len(u) == 2001 and sum(len(e.tokens) for e in u) == 25147  # syntactic words, MWT ranges skipped
    assert u[0].tokens == ["From", "the", "AP", "comes", "this", "story", ":"]
    assert u[0].tags == ["ADP", "DET", "PROPN", "VERB", "DET", "NOUN", "PUNCT"]
    s = read_sst(need(DATA / "sst5" / "trees" / "dev.txt"))
    assert len(s) == 1101 and s[0].label == "3" and s[0].tokens[:3] == ["It", "'s", "a"]
    assert [sum(e.label == str(k) for e in s) for k in range(5)] == [139, 289, 229, 279, 165]
    assert read_task_file("pos", DATA / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz")[0].tags[0] == "ADP"


def test_sentiment_tree_parser():
    assert parse_sentiment_tree("(3 (2 It) (4 (2 's) (4 good)))") == ("3", ["It", "'s", "good"])
    for bad in ["(3 (2 It)", "(3 (2 It)))", "word", "(3 a) (2 b)"]:
        with pytest.raises(ValueError):
            parse_sentiment_tree(bad)


def _write(tmp_path, name, text, gz=False):
    path = tmp_path / name
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("reader,name,text,where,what", [
    (read_conll2003, "bad.conll", "EU NNP I-NP I-ORG\nrejects VBZ I-VP\n", "line 2", "expected 4 columns, found 3"),
    (read_conll2003, "bad2.conll.gz", "EU NNP I-NP I-ORG\nx NN O PER\n", "line 2", "found 'PER'"),
    (read_conll2000, "bad.txt", "a DT B-NP\n\nb NN\n", "line 3", "expected 3 columns, found 2"),
    (read_conllu, "bad.conllu", "# c\n1\tA\ta\tDET\tDT\t_\t0\troot\t_\t_\nx\tB\tb\tN\tN\t_\t1\tdep\t_\t_\n",
     "line 3", "expected a word ID"),
    (read_conllu, "bad2.conllu", "1\tA\ta\tDET\n", "line 1", "expected 10 tab-separated"),
    (read_sst, "bad.txt", "(3 (2 a) (2 b))\n(2 (1 x)\n", "line 2", "unclosed"),
    (read_sst, "bad2.txt", "(7 (2 a))\n", "line 1", "expected a root label 0-4"),
])
def test_malformed_input_names_file_and_line(tmp_path, reader, name, text, where, what):
    path = _write(tmp_path, name, text, gz=name.endswith(".gz"))
    with pytest.raises(InputError) as e:
        reader(path)
    assert str(path) in str(e.value) and where in str(e.value) and what in str(e.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_conll2003(tmp_path / "nope.gz")
    with pytest.raises(InputError, match="no sentences"):
        read_conll2000(_write(tmp_path, "empty.txt", "\n\n"))


XML = """<?xml version="1.0" encoding="UTF-8" ?>
<corpus lang="en" source="x">
<text id="x.d000">
<sentence id="x.d000.s000">
<wf lemma="the" pos="DET">The</wf>
<instance id="x.d000.s000.t000" lemma="bank" pos="NOUN">bank</instance>
<instance id="x.d000.s000.t001" lemma="belong_to" pos="VERB">belongs to</instance>
<wf lemma="us" pos="PRON">us</wf>
</sentence>
</text>
</corpus>
"""


def test_raganato_reader_spans(tmp_path):
    [s] = read_raganato_xml(_write(tmp_path, "a.data.xml", XML))
    assert s.tokens == ["The", "bank", "belongs", "to", "us"]
    assert [(i.lemma, i.pos, i.start, i.end) for i in s.instances] == [("bank", "NOUN", 1, 2), ("belong_to", "VERB", 2, 4)]


def test_raganato_reader_errors(tmp_path):
    bad = XML.replace('lemma="bank" ', "")
    with pytest.raises(InputError, match=r"a\.data\.xml, line 6: <instance> without attribute\(s\) lemma"):
        read_raganato_xml(_write(tmp_path, "a.data.xml", bad))
    broken = XML.replace("</sentence>", "</sentense>")
    with pytest.raises(InputError, match=r"b\.data\.xml, line 9, column \d+: malformed XML"):
        read_raganato_xml(_write(tmp_path, "b.data.xml", broken))
    with pytest.raises(InputError, match=r"k\.txt, line 2: expected 'instance_id key"):
        read_gold_keys(_write(tmp_path, "k.txt", "a b%1:00:00::\nlonely\n"))


def test_wsd_scorer_rules():
    gold = {"a": {"k1"}, "b": {"k2", "k3"}, "c": {"k4"}, "d": {"k5"}}
    # a right; b right (any gold key); c: two keys, one right -> 0.5; d unanswered; unknown id ignored
    r = score_wsd(gold, {"a": "k1", "b": "k3", "c": {"k4", "x"}, "zzz": "k9"})
    assert r["precision"] == pytest.approx(100 * 2.5 / 3)
    assert r["recall"] == pytest.approx(100 * 2.5 / 4)
    p, rec = 2.5 / 3, 2.5 / 4
    assert r["f1"] == pytest.approx(100 * 2 * p * rec / (p + rec))


def test_first_sense_baseline_matches_published_all_figure():
    """Raganato et al. (2017): WordNet first sense scores F1 65.2 on ALL; reader + index + scorer together."""
    base = need(DATA / "wsd_raganato" / "Evaluation_Datasets" / "ALL")
    wordnet = WordNetSenses(need(DATA / "wordnet30" / "dict" / "index.sense.gz"))
    assert wordnet.first_sense("long", "ADJ") == "long%3:00:02::"
    sentences = read_raganato_xml(base / "ALL.data.xml")
    gold = read_gold_keys(base / "ALL.gold.key.txt")
    assert sum(len(s.instances) for s in sentences) == len(gold) == 7253
    assert round(score_wsd(gold, first_sense_answers(sentences, wordnet))["f1"], 1) == 65.2


def test_semcor_slice():
    path = need(DATA / "wsd_raganato" / "Training_Corpora" / "SemCor" / "semcor.data.xml.gz")
    sentences = read_raganato_xml(path, limit=3)
    assert len(sentences) == 3
    first = sentences[0].instances[0]
    assert (first.lemma, sentences[0].tokens[first.start:first.end]) == ("group", ["Fulton", "County", "Grand", "Jury"])


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "bad.conll"
    path.write_bytes(b"EU NNP I-NP I-ORG\n\n\xff NN I-NP O\n")
    with pytest.raises(InputError, match=r"bad\.conll, line 3: invalid UTF-8"):
        read_conll2003(path)


def test_limit_stops_early():
    examples = read_task_file("ner", need(DATA / "conll2003" / "eng.train.gz"), limit=5)
    assert len(examples) == 5 and examples[0].tokens[:3] == ["EU", "rejects", "German"]
    assert examples[0].tags[:3] == ["B-ORG", "O", "B-MISC"]
