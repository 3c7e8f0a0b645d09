"""elmo.training.batchers: each of the four batchers is a `Batcher` (the protocol the trainer uses)."""

from __future__ import annotations

import inspect

import pytest

from elmo.formats.lm_vocab import Vocab
from elmo.training import batchers
from elmo.training.batchers import BATCHINGS, Batch, Batcher, make_batcher

LINES = ["the cat sat on the mat", "a dog ran far", "", "we saw it", "the dog saw a cat", "it ran"]
BATCHER_CLASSES = (batchers.SentenceBatcher, batchers.StreamBatcher, batchers.OrderedBatcher, batchers.DocumentBatcher)


@pytest.fixture
def tiny_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    vocab = Vocab(["<S>", "</S>", "<UNK>", *sorted({w for line in LINES for w in line.split()})])
    return str(path), vocab


def test_the_protocol_names_what_the_trainer_calls():
    members = {name for name, _ in inspect.getmembers(Batcher, inspect.isfunction) if not name.startswith("_")}
    assert members == {"next_batch", "state", "restore", "close"}


@pytest.mark.parametrize("cls", BATCHER_CLASSES, ids=lambda cls: cls.__name__)
def test_each_batcher_class_has_the_protocols_methods_and_signatures(cls):
    for name in ("next_batch", "state", "restore", "close"):
        ours, protocol = inspect.signature(getattr(cls, name)), inspect.signature(getattr(Batcher, name))
        assert list(ours.parameters) == list(protocol.parameters), f"{cls.__name__}.{name}"
        assert ours.return_annotation == protocol.return_annotation, f"{cls.__name__}.{name}"


@pytest.mark.parametrize("batching", BATCHINGS)
def test_each_batching_gives_a_batcher_that_batches_and_resumes(tiny_corpus, batching):
    files, vocab = [tiny_corpus[0]], tiny_corpus[1]
    batcher = make_batcher(batching, files, vocab, rows=2, unroll=3)
    assert isinstance(batcher, Batcher)
    first = batcher.next_batch()
    assert isinstance(first, Batch) and first.n_tokens > 0
    saved = batcher.state()
    expected = batcher.next_batch()
    batcher.close()
    resumed = make_batcher(batching, files, vocab, rows=2, unroll=3)
    resumed.restore(saved)
    again = resumed.next_batch()
    resumed.close()
    assert again.fwd_targets.tolist() == expected.fwd_targets.tolist()
    assert again.bwd_targets.tolist() == expected.bwd_targets.tolist()
