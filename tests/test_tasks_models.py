"""Each task model learns: its loss falls on a small fixed problem; the learned layer weights are exposed."""

from __future__ import annotations

import itertools

import pytest
import torch

from elmo.model.chars import batch_to_ids
from elmo.tasks.crf import bio_constraints
from elmo.tasks.layers import ModelConfig, TaskBatch
from elmo.tasks.train import build_model

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _tagging_problem(n=12, t=6, layers=3, dim=8, seed=0):
    """Random sentences whose tags are a function of the word id and of one ELMo layer's sign."""
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(2, 20, (n, t), generator=g)
    lengths = torch.randint(2, t + 1, (n,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    words = words * mask
    elmo = torch.randn(n, layers, t, dim, generator=g) * mask[:, None, :, None]
    tags = torch.zeros(n, t, dtype=torch.long)
    for b in range(n):
        previous = "O"
        for i in range(int(lengths[b])):
            kind = "PER" if words[b, i] % 3 == 0 else "LOC" if elmo[b, 1, i, 0] > 0.5 else None
            tag = "O" if kind is None else ("I-" if previous[2:] == kind else "B-") + kind
            tags[b, i] = LABELS.index(tag)
            previous = tag
    chars = batch_to_ids([[f"w{int(w)}" for w in row[: int(n_)]] for row, n_ in zip(words, lengths)])
    chars = torch.nn.functional.pad(chars, (0, 0, 0, t - chars.shape[1]))
    return TaskBatch(words, chars, mask, elmo, tags)


def _train(model, batch, steps=40, lr=0.02):
    torch.manual_seed(0)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses = []
    for _ in range(steps):
        loss = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("crf,output_mix,static", [(True, True, 8), (False, False, 8), (True, False, 0)])
def test_tagger_loss_falls(crf, output_mix, static):
    torch.manual_seed(0)
    cfg = ModelConfig(kind="tagger", labels=LABELS, vocab_size=20, static_dim=static, char_filters=6, char_dim=4,
                      hidden=16, dropout=0.0, elmo_layers=3, elmo_dim=8, output_mix=output_mix, crf=crf)
    model = build_model(cfg)
    batch = _tagging_problem()
    losses = _train(model, batch)
    assert losses[-1] < 0.3 * losses[0]
    mixes = model.mixes()
    assert sum(mixes["input"]["weights"]) == pytest.approx(1.0, abs=1e-5)
    assert (mixes["output"] is not None) == output_mix
    assert mixes["input"]["weights"] != [pytest.approx(1 / 3)] * 3  # the mix was learned, not left at init
    decoded = model.decode(batch)
    assert [len(d) for d in decoded] == batch.mask.sum(1).tolist()
    if crf:  # decoding respects BIO: no I-X after O
        allowed, start = bio_constraints(LABELS)
        assert all(start[d[0]] and all(allowed[a, b] for a, b in itertools.pairwise(d)) for d in decoded)


def test_tagger_without_elmo_loss_falls():
    cfg = ModelConfig(kind="tagger", labels=LABELS, vocab_size=20, static_dim=8, char_filters=6, char_dim=4,
                      hidden=16, dropout=0.0, crf=True)
    batch = _tagging_problem()
    batch.elmo = None
    torch.manual_seed(0)
    losses = _train(build_model(cfg), batch)
    assert losses[-1] < 0.5 * losses[0]
    assert build_model(cfg).mixes() == {"input": None, "output": None}


def test_sentence_classifier_loss_falls():
    batch = _tagging_problem(n=16)
    batch.targets = (batch.elmo[:, 2, 0, :2].sum(-1) > 0).long() + 2 * (batch.words[:, 0] % 2 == 0).long()
    cfg = ModelConfig(kind="classifier", labels=["0", "1", "2", "3", "4"], vocab_size=20, static_dim=8,
                      char_filters=6, char_dim=4, hidden=16, dropout=0.0, elmo_layers=3, elmo_dim=8, output_mix=True)
    torch.manual_seed(0)
    model = build_model(cfg)
    losses = _train(model, batch)
    assert losses[-1] < 0.3 * losses[0]
    assert len(model.decode(batch)) == 16


def test_model_needs_some_input():
    cfg = ModelConfig(kind="tagger", labels=LABELS, vocab_size=2, static_dim=0, char_filters=0)
    with pytest.raises(ValueError, match="no input"):
        build_model(cfg)
