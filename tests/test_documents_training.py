"""Document batching (`--batching document`) and `elmo perplexity --mode document` (issue #48)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MICRO

from elmo.cli import main as cli_main
from elmo.errors import InputError
from elmo.formats.lm_vocab import Vocab
from elmo.model.options import BiLMConfig
from elmo.training.batchers import DocumentBatcher
from elmo.training.corpus import DocumentSource
from elmo.training.model import LanguageModel, detach_states
from elmo.training.perplexity import perplexity
from elmo.training.settings import TrainSettings
from elmo.training.trainer import train

pytestmark = pytest.mark.usefixtures("keep_threads")

DOCS = [["a b c", "d e"], ["f g", "h", "a c e"], ["b d f g h a"]]


def write_docs(path, docs, separator=""):
    path.write_text(f"\n{separator}\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return path


def vocab() -> Vocab:
    return Vocab(["<S>", "</S>", "<UNK>", *"abcdefgh"])


@pytest.mark.parametrize("separator", ["", "-DOCSTART-"])
def test_document_source_splits_on_blank_and_docstart_lines(tmp_path, separator):
    path = write_docs(tmp_path / "docs.txt", DOCS, separator)
    docs = list(DocumentSource([str(path)], shuffle=False, loop=False))
    assert docs == [[line.split() for line in d] for d in DOCS]


def test_document_source_keeps_documents_whole_across_chunks_and_resumes(tmp_path):
    path = write_docs(tmp_path / "docs.txt", DOCS * 5)
    whole = [[line.split() for line in d] for d in DOCS * 5]
    source = DocumentSource([str(path)], seed=3, shuffle=True, loop=False, chunk_lines=2)
    seen = list(source)
    assert sorted(map(str, seen)) == sorted(map(str, whole))  # no document split by a chunk end
    first = DocumentSource([str(path)], seed=3, shuffle=True, loop=False, chunk_lines=2)
    head = [first.next() for _ in range(4)]
    resumed = DocumentSource([str(path)], seed=3, shuffle=True, loop=False, chunk_lines=2)
    resumed.restore(first.state())
    assert head + list(resumed) == seen


def test_rows_read_documents_forward_and_reversed_backward_with_resets(tmp_path):
    path = write_docs(tmp_path / "docs.txt", DOCS)
    v = vocab()
    batcher = DocumentBatcher(DocumentSource([str(path)], shuffle=False, loop=False), v, rows=2, unroll=4)
    windows = []
    while (batch := batcher.next_batch()) is not None:
        windows.append(batch)
    # row 0 takes document 0 (2 sentences: 4 + 3 = 7 pairs: windows of 4 and 3), then document 2 (7 pairs)
    assert windows[0].reset.tolist() == [True, True]
    assert windows[1].reset.tolist() == [False, False]
    assert windows[2].reset.tolist()[0] is True and windows[1].lengths[0] == 3  # padded, then a fresh stream
    expected_fwd = ["<S>", "a", "b", "c", "<S>", "d", "e"]
    expected_bwd = ["</S>", "e", "d", "</S>", "c", "b", "a"]  # the reversed document: last sentence first
    got_fwd, got_bwd, got_fwd_t, got_bwd_t = [], [], [], []
    for batch in windows[:2]:
        n = int(batch.lengths[0])
        got_fwd += batch.fwd_inputs[0, :n].tolist()
        got_bwd += batch.bwd_inputs[0, :n].tolist()
        got_fwd_t += batch.fwd_targets[0, :n].tolist()
        got_bwd_t += batch.bwd_targets[0, :n].tolist()
    assert got_fwd_t == v.encode(["a", "b", "c", "</S>", "d", "e", "</S>"])
    assert got_bwd_t == v.encode(["e", "d", "<S>", "c", "b", "a", "<S>"])
    assert len(got_fwd) == len(expected_fwd) and len(got_bwd) == len(expected_bwd)


def test_reset_rate_cuts_documents_at_sentence_starts(tmp_path):
    path = write_docs(tmp_path / "docs.txt", DOCS)
    def pieces(rate):
        b = DocumentBatcher(DocumentSource([str(path)], shuffle=False, loop=False), vocab(), rows=1, unroll=50, reset_rate=rate)
        return sum(int(batch.reset.sum()) for batch in iter(b.next_batch, None))
    assert pieces(0.0) == 3  # one stream per document
    assert pieces(1.0) == 6  # one per sentence
    with pytest.raises(InputError, match="reset rate"):
        DocumentBatcher(DocumentSource([str(path)]), vocab(), rows=1, unroll=5, reset_rate=1.5)


def test_document_batcher_resumes_exactly(tmp_path):
    path = write_docs(tmp_path / "docs.txt", DOCS * 4)

    def make():
        return DocumentBatcher(DocumentSource([str(path)], seed=1, chunk_lines=5), vocab(), rows=2, unroll=3, reset_rate=0.5, seed=1)

    straight = make()
    batches = [straight.next_batch() for _ in range(12)]
    first = make()
    for _ in range(5):
        first.next_batch()
    resumed = make()
    resumed.restore(json.loads(json.dumps(first.state())))  # what a checkpoint keeps
    for want in batches[5:]:
        got = resumed.next_batch()
        for field in ("fwd_targets", "bwd_targets", "lengths", "reset"):
            assert torch.equal(getattr(got, field), getattr(want, field))


def test_reset_rows_start_from_zero_state(tmp_path):
    """A row flagged `reset` computes what it would from no state at all; the other rows carry theirs."""
    path = write_docs(tmp_path / "docs.txt", DOCS)
    torch.manual_seed(0)
    model = LanguageModel(BiLMConfig.from_options(MICRO), len(vocab())).eval()
    batcher = DocumentBatcher(DocumentSource([str(path)], shuffle=False, loop=False), vocab(), rows=2, unroll=4)
    batches = [batcher.next_batch() for _ in range(3)]
    with torch.no_grad():
        _, _, states = model(batches[0], None, True)
        _, _, states = model(batches[1], detach_states(states), True)
        nll_f, nll_b, _ = model(batches[2], states, True)
        batch = batches[2]
        assert batch.reset.tolist() == [True, False]
        alone = type(batch)(batch.char_ids, batch.fwd_inputs[:1], batch.bwd_inputs[:1], batch.fwd_targets[:1],
                            batch.bwd_targets[:1], batch.mask[:1], batch.lengths[:1])
        nll_f0, nll_b0, _ = model(alone, None, True)
    n0 = int(batch.lengths[0])
    torch.testing.assert_close(nll_f[:n0], nll_f0, atol=1e-6, rtol=0)
    torch.testing.assert_close(nll_b[:n0], nll_b0, atol=1e-6, rtol=0)


def test_train_with_document_batching_and_score_both_modes(tmp_path):
    corpus = write_docs(tmp_path / "docs.txt", DOCS * 6)
    v = tmp_path / "vocab.txt"
    v.write_text("\n".join(vocab().tokens) + "\n", encoding="utf-8")
    s = TrainSettings(out=str(tmp_path / "run"), train=[str(corpus)], vocab=str(v), options=MICRO, batch_size=2,
                      unroll_steps=4, negatives=4, max_steps=4, threads=1, progress=False, log_every=1,
                      batching="document", reset_rate=0.25)
    summary = train(s)
    assert summary["step"] == 4 and summary["checkpoint"]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["batching"] == "document" and run["reset_rate"] == 0.25
    results = {}
    for mode in ("document", "sentence"):
        assert cli_main(["perplexity", str(tmp_path / "run"), "--test", str(corpus), "--mode", mode, "--json",
                         "--no-progress"]) == 0
    from elmo.training.perplexity import load_for_scoring

    model, voc = load_for_scoring(tmp_path / "run")
    for mode in ("document", "sentence"):
        results[mode] = perplexity(model, voc, str(corpus), mode=mode, batch_size=4)
    assert results["document"]["tokens"] == results["sentence"]["tokens"]  # every token scored once either way
    assert results["document"]["forward"] != results["sentence"]["forward"]


def test_reset_rate_needs_document_batching(tmp_path):
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    v = tmp_path / "vocab.txt"
    v.write_text("\n".join(vocab().tokens) + "\n", encoding="utf-8")
    s = TrainSettings(out=str(tmp_path / "run"), train=[str(corpus)], vocab=str(v), options=MICRO, max_steps=1,
                      progress=False, batching="sentence", reset_rate=0.5)
    with pytest.raises(InputError, match="--batching document"):
        train(s)


def test_a_corpus_without_document_breaks_is_refused(tmp_path, monkeypatch):
    import elmo.embed.documents as documents  # the one document-length check, for embedding and training

    monkeypatch.setattr(documents, "MAX_DOCUMENT_LINES", 5)
    path = tmp_path / "flat.txt"
    path.write_text("a b\n" * 20, encoding="utf-8")
    with pytest.raises(InputError, match=r"flat.txt, line 6: a document of more than 5 sentences; expected blank lines"):
        DocumentSource([str(path)], shuffle=False, loop=False).next()
