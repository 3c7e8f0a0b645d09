"""Documents: sentences that belong together, read as one text by each direction of the biLM.

In text files, a blank line or a `-DOCSTART-` line (CoNLL's marker) ends a document.

`contextualize_documents` runs a biLM over whole documents as `elmo.training.batchers.DocumentBatcher`
trains it: the forward LM reads the document left to right from zero state, its inputs per sentence
`<S> w1 .. wn` (the next sentence's `<S>` follows wn); the backward LM reads the reversed document
from zero state, per sentence (last sentence first) `</S> wn .. w1`. Long documents run in windows
of `chunk_steps` steps with the LSTM state carried, which gives exactly the unchunked result.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from elmo.errors import InputError

if TYPE_CHECKING:
    from elmo.model.bilm import BiLM

DOCSTART = "-DOCSTART-"
CONTEXTS = ("sentence", "document")  # what a sentence's vectors see: itself, or its whole document
MAX_DOCUMENT_LINES = 100_000  # a longer "document" is a corpus without document breaks
CHUNK_STEPS = 64  # LSTM steps per window: bounds the gate products' memory for long documents

Document = Sequence[Sequence[str]]


def is_document_break(line: str) -> bool:
    """True for a line that separates documents rather than holding a sentence."""
    stripped = line.strip()
    return not stripped or stripped == DOCSTART


def check_context(context: str) -> str:
    if context not in CONTEXTS:
        raise InputError(f"context must be one of {', '.join(CONTEXTS)}, found {context!r}")
    return context


def check_document_length(sentences: int, source: str, number: int) -> None:
    """Refuse, naming the (0-based) line, a document grown past MAX_DOCUMENT_LINES: a corpus without breaks."""
    if sentences > MAX_DOCUMENT_LINES:
        raise InputError(f"{source}, line {number + 1}: a document of more than {MAX_DOCUMENT_LINES:,} sentences; "
                         "expected blank lines (or -DOCSTART- lines) between documents")


def line_documents(lines: Iterable[tuple[int, str]], source: str = "input") -> Iterator[list[list[str]]]:
    """Documents of (0-based line number, text) lines, one sentence per line, for one output per line:
    each run of sentence lines is a document; each separator line is a document of one empty sentence
    (it gets what an empty line gets in sentence mode, and adds nothing to any document)."""
    document: list[list[str]] = []
    for number, text in lines:
        if is_document_break(text):
            if document:
                yield document
            document = []
            yield [[]]
            continue
        document.append(text.split())
        check_document_length(len(document), source, number)
    if document:
        yield document


def check_documents(documents: Sequence[Document], first: int = 0) -> None:
    """Documents are lists of tokenized sentences: a bare sentence or string is a clear error, not letters.
    `first`: the number of the first document, for the message."""
    for d, document in enumerate(documents, first):
        if isinstance(document, (str, bytes)) or any(isinstance(s, (str, bytes)) for s in document):
            raise InputError(f"document {d}: expected a list of tokenized sentences (lists of str), found "
                             f"{type(document).__name__} of {type(next(iter(document), None)).__name__}")


class _Streams:
    """Each document's two input streams as indices into a token table, and where its words sit in them.

    Table rows: the batch's words in order (0 .. N-1), then <S> (N), </S> (N+1). A word at forward
    position o + i (sentence offset o, word i from 1) sits at backward position length - o - i.
    """

    def __init__(self, documents: Sequence[Document]):
        n = sum(len(s) for document in documents for s in document)
        bos, eos = n, n + 1
        self.forward: list[list[int]] = []
        self.backward: list[list[int]] = []
        self.word_row: list[int] = []  # per word: its document
        self.word_fpos: list[int] = []
        self.word_bpos: list[int] = []
        word = 0
        for d, document in enumerate(documents):
            fwd, reads = [], []  # reads: what the forward LM predicts, reversed it is the backward input
            for sentence in document:
                if not sentence:  # an empty sentence adds nothing to its document's text
                    continue
                ids = list(range(word, word + len(sentence)))
                offset = len(fwd)
                fwd += [bos, *ids]
                reads += [*ids, eos]
                self.word_fpos += range(offset + 1, offset + 1 + len(sentence))
                word += len(sentence)
            self.word_row += [d] * (word - len(self.word_bpos))
            self.word_bpos += [len(fwd) - p for p in self.word_fpos[len(self.word_bpos) :]]
            self.forward.append(fwd)
            self.backward.append(reads[::-1])


def _run_windows(stack: torch.nn.Module, table: torch.Tensor, streams: list[list[int]], rows_of_words: torch.Tensor,
                 positions: torch.Tensor, chunk_steps: int) -> list[torch.Tensor]:
    """Run one direction's LSTM stack over `streams` (sorted by descending length) in windows of
    `chunk_steps`, the state carried; -> per layer, the outputs at the words' positions (N, P)."""
    lengths = torch.tensor([len(s) for s in streams], device=table.device)
    index = torch.full((len(streams), int(lengths.max())), table.shape[0] - 1, dtype=torch.long)
    for r, stream in enumerate(streams):
        index[r, : len(stream)] = torch.tensor(stream, dtype=torch.long)
    index = index.to(table.device)
    words: list[torch.Tensor] = []
    states = None
    for start in range(0, index.shape[1], chunk_steps):
        rows = int((lengths > start).sum())  # the documents still running: a prefix, as they are sorted
        steps = (lengths[:rows] - start).clamp(max=chunk_steps)
        if states is not None:
            states = [(c[:rows], h[:rows]) for c, h in states]
        outputs, states = stack(table[index[:rows, start : start + chunk_steps]], steps, states)
        if not words:
            words = [o.new_zeros(len(positions), o.shape[-1]) for o in outputs]
        here = ((positions >= start) & (positions < start + chunk_steps)).nonzero(as_tuple=True)[0]
        for found, out in zip(words, outputs):
            found[here] = out[rows_of_words[here], positions[here] - start]
    return words


def contextualize_documents(bilm: BiLM, documents: Sequence[Document], chunk_steps: int = CHUNK_STEPS) -> list[torch.Tensor]:
    """One (L+1, n, 2P) float32 tensor per sentence of `documents`, in order, each document read from
    zero state by both directions (module docstring). Layer 0 is [token; token], as `BiLM.contextualize`."""
    if isinstance(chunk_steps, bool) or not isinstance(chunk_steps, int) or chunk_steps <= 0:
        raise InputError(f"chunk_steps must be a positive integer, found {chunk_steps!r}")
    sentences = [s for document in documents for s in document]
    device = bilm.char_encoder.char_embed.device
    words = [w for s in sentences for w in s]
    if not words:
        return [torch.zeros(bilm.num_layers, 0, bilm.output_dim(), device=device) for _ in sentences]
    ids = bilm.batch_to_ids([words]).to(device)
    tokens = bilm.token_vectors(ids, (ids > 0).any(-1))[0]
    bos, eos = bilm.boundary_vectors()
    table = torch.cat([tokens, torch.stack([bos, eos]).to(tokens.dtype), tokens.new_zeros(1, tokens.shape[1])])
    streams = _Streams(documents)
    order = sorted(range(len(documents)), key=lambda d: len(streams.forward[d]), reverse=True)
    order = [d for d in order if streams.forward[d]]
    place = {d: r for r, d in enumerate(order)}  # document -> its row in the sorted batch
    rows = torch.tensor([place[d] for d in streams.word_row], device=device)
    fwd = _run_windows(bilm.forward_lstm, table, [streams.forward[d] for d in order], rows,
                       torch.tensor(streams.word_fpos, device=device), chunk_steps)
    bwd = _run_windows(bilm.backward_lstm, table, [streams.backward[d] for d in order], rows,
                       torch.tensor(streams.word_bpos, device=device), chunk_steps)
    layers = [torch.cat([tokens, tokens], dim=-1)]
    layers += [torch.cat([f, b], dim=-1).float() for f, b in zip(fwd, bwd)]
    return list(torch.stack(layers).split([len(s) for s in sentences], dim=1))
