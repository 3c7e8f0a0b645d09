"""CRF against brute force; span F1 and accuracy on hand-made examples."""

from __future__ import annotations

import itertools

import pytest
import torch

from elmo.tasks.crf import CRF, bio_constraints
from elmo.tasks.metrics import accuracy, span_f1
from elmo.tasks.readers import iob1_to_iob2


def _brute_force(crf: CRF, emissions: torch.Tensor, n: int):
    """All K^n sequences of one sentence: their scores, by the definition of the CRF."""
    k = emissions.shape[-1]
    seqs = list(itertools.product(range(k), repeat=n))
    tags = torch.tensor(seqs)
    e = emissions[:, :n].expand(len(seqs), n, k)
    scores = crf.score(e, tags, torch.ones(len(seqs), n, dtype=torch.bool))
    return seqs, scores


@pytest.mark.parametrize("constrained", [False, True])
def test_forward_algorithm_and_viterbi_equal_brute_force(constrained):
    torch.manual_seed(0)
    labels = ["O", "B-PER", "I-PER", "B-LOC"]
    crf = CRF(4, *bio_constraints(labels)) if constrained else CRF(4)
    with torch.no_grad():
        crf.start.normal_()
        crf.end.normal_()
        crf.transitions.normal_()
    emissions = torch.randn(1, 3, 4)
    mask = torch.ones(1, 3, dtype=torch.bool)
    seqs, scores = _brute_force(crf, emissions, 3)
    if constrained:  # disallowed sequences have (near) zero probability
        ok = torch.tensor([labels[s[0]] != "I-PER" and all(labels[b] != "I-PER" or labels[a] in ("B-PER", "I-PER")
                                                           for a, b in itertools.pairwise(s)) for s in seqs])
        assert scores[~ok].max() < scores[ok].min() - 1000
    assert crf.log_partition(emissions, mask).item() == pytest.approx(torch.logsumexp(scores, 0).item(), abs=1e-5)
    assert crf.viterbi(emissions, mask) == [list(seqs[int(scores.argmax())])]


def test_padding_is_ignored():
    torch.manual_seed(1)
    crf = CRF(3)
    e = torch.randn(2, 4, 3)
    e[1, 2:] = 0.0  # the second sentence has 2 tokens
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    z = crf.log_partition(e, mask)
    seqs, scores = _brute_force(crf, e[1:2], 2)
    assert z[1].item() == pytest.approx(torch.logsumexp(scores, 0).item(), abs=1e-5)
    paths = crf.viterbi(e, mask)
    assert len(paths[0]) == 4 and paths[1] == list(seqs[int(scores.argmax())])


def test_nll_is_a_probability():
    torch.manual_seed(2)
    crf = CRF(3)
    e = torch.randn(1, 3, 3)
    mask = torch.ones(1, 3, dtype=torch.bool)
    total = sum(torch.exp(-crf.neg_log_likelihood(e, torch.tensor([s]), mask)).item()
                for s in itertools.product(range(3), repeat=3))
    assert total == pytest.approx(1.0, abs=1e-5)


def test_span_f1_known_answers():
    pytest.importorskip("seqeval", reason="span F1 needs the tasks extra (seqeval): pip install -e '.[tasks]'")
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    assert span_f1(gold, gold)["f1"] == 100.0
    # 3 gold spans; predicted: PER right, LOC typed wrong as ORG, ORG missed -> P = 1/2, R = 1/3
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "O"]]
    r = span_f1(gold, pred)
    assert r["precision"] == pytest.approx(50.0)
    assert r["recall"] == pytest.approx(100 / 3)
    assert r["f1"] == pytest.approx(40.0)
    # a partial span is wrong: PER predicted as one token
    assert span_f1([["B-PER", "I-PER"]], [["B-PER", "O"]])["f1"] == 0.0


def test_span_f1_after_iob1_conversion():
    """Two adjacent PER entities in IOB1 ("I-PER B-PER") stay two entities after conversion."""
    pytest.importorskip("seqeval", reason="span F1 needs the tasks extra (seqeval): pip install -e '.[tasks]'")
    gold = [iob1_to_iob2(["I-PER", "B-PER", "O", "I-LOC", "I-LOC"])]
    assert gold == [["B-PER", "B-PER", "O", "B-LOC", "I-LOC"]]
    merged = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]]  # the two people read as one: 1 of 3 spans wrong
    r = span_f1(gold, merged)
    assert r["precision"] == pytest.approx(50.0) and r["recall"] == pytest.approx(100 / 3)


def test_accuracy():
    assert accuracy(["a", "b", "c", "d"], ["a", "b", "x", "d"]) == 75.0
    assert accuracy([["a", "b"], ["c"]], [["a", "x"], ["c"]]) == pytest.approx(200 / 3)
    with pytest.raises(ValueError):
        accuracy(["a"], ["a", "b"])
