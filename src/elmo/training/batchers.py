"""Batching for training (docs/format.md section 7, "Batching"): four batchers (`--batching`), each a
`Batcher`, turning a corpus (corpus.py) into `Batch` windows for both directions.

- `SentenceBatcher` (`sentence`, the default): each sentence its own row, from zero LSTM state, as
  the embedder runs a model. A model trained otherwise has never seen a sentence start from zero
  state, and may fail there (docs/training.md, "Which batching").
- `StreamBatcher` (`stream`, bilm-tf's): shuffled `<S> ... </S>` sentences packed into one stream
  per row, cut into windows of `unroll` tokens, the LSTM state carried across windows.
- `OrderedBatcher` (`ordered`, Kim et al.'s): the corpus in file order, cut into one contiguous
  stretch per row, the state carried, for text whose order carries meaning (PTB, documents).
- `DocumentBatcher` (`document`): each row reads one document as a stream from zero state, the
  backward LM over the reversed document, so each direction's carried state is the text before it
  in its own reading direction; at a share of sentence starts (`reset_rate`) the document is cut,
  so the model also keeps working from zero state (the embedder's default).

In `stream` and `sentence`, both directions read the same sentence in the same row: the backward
stream is the forward one with each sentence reversed, so the two LMs see aligned windows. (bilm-tf
shuffles the two directions independently; the losses are separate, so this changes nothing but
halves the reading and the character-CNN work.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from elmo.errors import InputError
from elmo.model.chars import BOS_TOKEN, EOS_TOKEN, MAX_CHARS, token_to_ids
from elmo.model.devices import move_tensors

from .corpus import CHUNK_LINES, DocumentSource, SentenceSource, read_sentences


@dataclass
class Batch:
    """One window for both directions. `char_ids` (U, 50) holds the batch's distinct input tokens;
    `fwd_inputs`/`bwd_inputs` (B, T) index it from 1 (0 = no token); targets are vocabulary ids.
    `reset` (document batching) marks rows that start a new stream, whose carried state is dropped."""

    char_ids: torch.Tensor
    fwd_inputs: torch.Tensor
    bwd_inputs: torch.Tensor
    fwd_targets: torch.Tensor
    bwd_targets: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    reset: torch.Tensor | None = None  # (B,) rows whose LSTM state starts from zero at this window

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    def to(self, device: torch.device | str) -> Batch:
        return move_tensors(self, device)


@runtime_checkable
class Batcher(Protocol):
    """What the trainer, the checkpoints and perplexity ask of a batcher; the four below are Batchers.

    `next_batch` gives the next window for both directions, or None when a non-looping batcher has
    read everything. `state` is a small JSON-able record of the position (with the source's), and
    `restore` puts a fresh batcher of the same settings there, so a resumed run reads exactly the
    windows an uninterrupted one would. `close` releases the open corpus file, if any.
    """

    def next_batch(self) -> Batch | None: ...

    def state(self) -> dict: ...

    def restore(self, state: dict) -> None: ...

    def close(self) -> None: ...


class _Packer:
    """Collects (row, step) -> token for both directions and turns them into a Batch."""

    def __init__(self, rows: int, steps: int):
        self.types: dict[str, int] = {}
        self.arrays = np.zeros((4, rows, steps), dtype=np.int64)  # fwd in, bwd in, fwd target, bwd target
        self.lengths = np.zeros(rows, dtype=np.int64)

    def put(self, r: int, t: int, fwd_token: str, bwd_token: str, fwd_target: int, bwd_target: int) -> None:
        types = self.types
        a = self.arrays
        a[0, r, t] = types.setdefault(fwd_token, len(types) + 1)
        a[1, r, t] = types.setdefault(bwd_token, len(types) + 1)
        a[2, r, t], a[3, r, t] = fwd_target, bwd_target

    def batch(self) -> Batch:
        char_ids = torch.tensor([token_to_ids(t) for t in self.types], dtype=torch.long).view(-1, 50)
        a = torch.from_numpy(self.arrays)
        lengths = torch.from_numpy(self.lengths)
        mask = torch.arange(a.shape[2]).unsqueeze(0) < lengths.unsqueeze(1)
        return Batch(char_ids, a[0], a[1], a[2], a[3], mask, lengths)


class StreamBatcher:
    """bilm-tf's `_get_batch`: row r owns a stream of sentences and fills `unroll` positions per call.

    From sentence s = [<S>] + words + [</S>] it takes inputs s[:-1] and targets s[1:]; a sentence
    may be cut at the window end and continue in the next window. The backward rows read reversed
    sentences. When a non-looping source runs out, rows end early (see `Batch.lengths`).
    """

    def __init__(self, source: SentenceSource, vocab, rows: int, unroll: int):
        self.source, self.vocab, self.rows, self.unroll = source, vocab, rows, unroll
        self._rows: list[list | None] = [None] * rows  # [tokens with markers, ids, position]

    def _load(self, words: list[str] | None) -> list | None:
        if words is None:
            return None
        tokens = [BOS_TOKEN, *words, EOS_TOKEN]
        return [tokens, self.vocab.encode(tokens), 0]

    def next_batch(self) -> Batch | None:
        packer = _Packer(self.rows, self.unroll)
        for r in range(self.rows):
            t = 0
            while t < self.unroll:
                row = self._rows[r]
                if row is None or row[2] >= len(row[0]) - 1:
                    row = self._rows[r] = self._load(self.source.next())
                    if row is None:
                        break
                tokens, ids, pos = row
                n = len(tokens)
                k = min(self.unroll - t, n - 1 - pos)
                for j in range(pos, pos + k):
                    packer.put(r, t, tokens[j], tokens[n - 1 - j], ids[j + 1], ids[n - 2 - j])
                    t += 1
                row[2] = pos + k
            packer.lengths[r] = t
        if not packer.lengths.any():
            return None
        return packer.batch()

    def state(self) -> dict:
        rows = [None if row is None else [row[0][1:-1], row[2]] for row in self._rows]
        return {"source": self.source.state(), "rows": rows}

    def restore(self, state: dict) -> None:
        if len(state["rows"]) != self.rows:
            raise InputError(f"the checkpoint has {len(state['rows'])} batch rows, this run has {self.rows}")
        self.source.restore(state["source"])
        self._rows = []
        for row in state["rows"]:
            loaded = self._load(row[0]) if row is not None else None
            if loaded is not None:
                loaded[2] = row[1]
            self._rows.append(loaded)

    def close(self) -> None:
        self.source.close()


class SentenceBatcher:
    """Each sentence its own row from zero state; rows sorted by descending length (the LSTM needs it)."""

    def __init__(self, source: SentenceSource, vocab, rows: int):
        self.source, self.vocab, self.rows = source, vocab, rows

    def next_batch(self) -> Batch | None:
        sentences = []
        while len(sentences) < self.rows and (words := self.source.next()) is not None:
            sentences.append([BOS_TOKEN, *words, EOS_TOKEN])
        if not sentences:
            return None
        sentences.sort(key=len, reverse=True)
        packer = _Packer(len(sentences), len(sentences[0]) - 1)
        for r, tokens in enumerate(sentences):
            ids, n = self.vocab.encode(tokens), len(tokens)
            for j in range(n - 1):
                packer.put(r, j, tokens[j], tokens[n - 1 - j], ids[j + 1], ids[n - 2 - j])
            packer.lengths[r] = n - 1
        return packer.batch()

    def state(self) -> dict:
        return {"source": self.source.state(), "rows": None}

    def restore(self, state: dict) -> None:
        self.source.restore(state["source"])

    def close(self) -> None:
        self.source.close()


class OrderedBatcher:
    """Kim et al.'s batching: the corpus in order as `rows` contiguous streams, state carried.

    The `<S> w1 .. wn </S>` sentences of the files, in order, make one stream of (input, target)
    pairs; it is cut into `rows * world` stretches of equal length (Kim: `data:view(batch_size, -1)`;
    the remainder is dropped) and each row reads its stretch in windows of `unroll`. The backward LM
    reads the reversed corpus the same way, so its carried state comes from the text that follows.
    An epoch is one pass over the stretches; the state is the epoch and the window, so resuming is
    exact. The corpus is held in memory as integer arrays (4 int32 per token).
    """

    def __init__(self, files: list[str], vocab, rows: int, unroll: int, shard: tuple[int, int] = (0, 1), loop: bool = True):
        self.rows, self.unroll, self.loop = rows, unroll, loop
        types: dict[str, int] = {}
        parts: list[list[np.ndarray]] = [[], [], [], []]  # fwd inputs, fwd targets, bwd inputs (unreversed), bwd targets
        for path in files:
            for _, words in read_sentences(path):
                tokens = [BOS_TOKEN, *words, EOS_TOKEN]
                kinds = np.array([types.setdefault(t, len(types)) for t in tokens], dtype=np.int32)
                ids = np.array(vocab.encode(tokens), dtype=np.int32)
                parts[0].append(kinds[:-1])
                parts[1].append(ids[1:])
                parts[2].append(kinds[1:])
                parts[3].append(ids[:-1])
        if not parts[0]:
            raise InputError(f"{', '.join(files)}: no sentences (the corpus is empty or only blank lines)")
        fwd_in, fwd_tgt, bwd_in, bwd_tgt = (np.concatenate(p) for p in parts)
        rank, world = shard
        self.length = len(fwd_in) // (rows * world)
        if self.length == 0:
            raise InputError(f"{', '.join(files)}: {len(fwd_in):,} tokens cannot fill {rows * world} ordered streams")
        first = rank * rows * self.length

        def stretches(a: np.ndarray) -> np.ndarray:
            return a[first : first + rows * self.length].reshape(rows, self.length)

        self.fwd_in, self.fwd_tgt = stretches(fwd_in), stretches(fwd_tgt)
        self.bwd_in, self.bwd_tgt = stretches(bwd_in[::-1]), stretches(bwd_tgt[::-1])
        self.char_table = np.array([token_to_ids(t) for t in types], dtype=np.int16).reshape(-1, MAX_CHARS)
        self.epoch, self.window = 0, 0

    @property
    def windows_per_epoch(self) -> int:
        return -(-self.length // self.unroll)

    def next_batch(self) -> Batch | None:
        if self.window >= self.windows_per_epoch:
            if not self.loop:
                return None
            self.epoch, self.window = self.epoch + 1, 0
        cut = slice(self.window * self.unroll, min(self.length, (self.window + 1) * self.unroll))
        self.window += 1
        fwd_in, bwd_in = self.fwd_in[:, cut], self.bwd_in[:, cut]
        kinds, inverse = np.unique(np.stack([fwd_in, bwd_in]), return_inverse=True)
        inputs = torch.from_numpy(inverse.reshape(2, *fwd_in.shape).astype(np.int64) + 1)  # 0 = no token
        steps = fwd_in.shape[1]
        lengths = torch.full((self.rows,), steps, dtype=torch.long)
        mask = torch.ones(self.rows, steps, dtype=torch.bool)
        targets = [torch.from_numpy(t[:, cut].astype(np.int64)) for t in (self.fwd_tgt, self.bwd_tgt)]
        char_ids = torch.from_numpy(self.char_table[kinds].astype(np.int64))
        return Batch(char_ids, inputs[0], inputs[1], targets[0], targets[1], mask, lengths)

    def state(self) -> dict:
        return {"epoch": self.epoch, "window": self.window}

    def restore(self, state: dict) -> None:
        self.epoch, self.window = state["epoch"], state["window"]

    def close(self) -> None:
        pass


class DocumentBatcher:
    """Each row reads one document (or a piece of one) as a stream of windows, from zero state.

    A document's sentences, in order, make the forward stream (`<S> w1 .. wn` as inputs, `w1 .. wn
    </S>` as targets, as in `stream`); the backward stream is the reversed document, so the backward
    LM's carried state comes from the sentences after the one it reads. Each sentence start after
    the first cuts the document with probability `reset_rate` (drawn per document from the seed), so
    1.0 trains on sentences alone and 0.0 on whole documents. A piece starts at a window's start with
    `Batch.reset` set for its row, and a row whose piece ends early is padded to the window's end.
    """

    def __init__(self, source: DocumentSource, vocab, rows: int, unroll: int, reset_rate: float = 0.0, seed: int = 0):
        if not 0.0 <= reset_rate <= 1.0:
            raise InputError(f"the reset rate must be in [0, 1], found {reset_rate!r}")
        self.source, self.vocab, self.rows, self.unroll = source, vocab, rows, unroll
        self.reset_rate, self.seed = reset_rate, seed
        self._rows: list[list | None] = [None] * rows  # [sentences, streams, position]
        self._pending: list[list[list[str]]] = []  # pieces of the current document not yet given to a row
        self._documents = 0  # documents read, which seeds each document's cuts

    def _pieces(self, document: list[list[str]]) -> list[list[list[str]]]:
        rng = np.random.default_rng([self.seed, 104_729, self._documents])
        self._documents += 1
        cuts = rng.random(len(document)) < self.reset_rate
        pieces: list[list[list[str]]] = []
        for k, words in enumerate(document):
            if k == 0 or cuts[k]:
                pieces.append([])
            pieces[-1].append(words)
        return pieces

    def _load(self, sentences: list[list[str]], position: int = 0) -> list:
        """The (input token, target id) streams of both directions for a piece."""
        fwd_tokens, fwd_targets, bwd_tokens, bwd_targets = [], [], [], []
        for words in sentences:
            tokens = [BOS_TOKEN, *words, EOS_TOKEN]
            ids = self.vocab.encode(tokens)
            fwd_tokens += tokens[:-1]
            fwd_targets += ids[1:]
        for words in reversed(sentences):
            tokens = [EOS_TOKEN, *reversed(words), BOS_TOKEN]
            ids = self.vocab.encode(tokens)
            bwd_tokens += tokens[:-1]
            bwd_targets += ids[1:]
        return [sentences, (fwd_tokens, fwd_targets, bwd_tokens, bwd_targets), position]

    def _next_piece(self) -> list | None:
        while not self._pending:
            document = self.source.next()
            if document is None:
                return None
            self._pending = self._pieces(document)
        return self._load(self._pending.pop(0))

    def next_batch(self) -> Batch | None:
        packer = _Packer(self.rows, self.unroll)
        reset = np.zeros(self.rows, dtype=bool)
        for r in range(self.rows):
            row = self._rows[r]
            if row is None or row[2] >= len(row[1][0]):
                row = self._rows[r] = self._next_piece()
                if row is None:
                    continue
            (fwd_tokens, fwd_targets, bwd_tokens, bwd_targets), pos = row[1], row[2]
            reset[r] = pos == 0
            k = min(self.unroll, len(fwd_tokens) - pos)
            for t in range(k):
                j = pos + t
                packer.put(r, t, fwd_tokens[j], bwd_tokens[j], fwd_targets[j], bwd_targets[j])
            packer.lengths[r] = k
            row[2] = pos + k
        if not packer.lengths.any():
            return None
        batch = packer.batch()
        batch.reset = torch.from_numpy(reset)
        return batch

    def state(self) -> dict:
        rows = [None if row is None else [row[0], row[2]] for row in self._rows]
        return {"source": self.source.state(), "rows": rows, "pending": self._pending, "documents": self._documents}

    def restore(self, state: dict) -> None:
        if len(state["rows"]) != self.rows:
            raise InputError(f"the checkpoint has {len(state['rows'])} batch rows, this run has {self.rows}")
        self.source.restore(state["source"])
        self._rows = [None if row is None else self._load(row[0], row[1]) for row in state["rows"]]
        self._pending, self._documents = state["pending"], state["documents"]

    def close(self) -> None:
        self.source.close()


BATCHINGS = ("sentence", "stream", "ordered", "document")


def make_batcher(batching: str, files: list[str], vocab, rows: int, unroll: int, seed: int = 0,
                 shard: tuple[int, int] = (0, 1), chunk_lines: int = CHUNK_LINES, reset_rate: float = 0.0) -> Batcher:
    """The training batcher for `--batching`, reading `files` in a loop (one DDP rank's share)."""
    if batching == "ordered":
        return OrderedBatcher(files, vocab, rows, unroll, shard=shard)
    if batching == "document":
        source = DocumentSource(files, seed=seed, shuffle=True, loop=True, shard=shard, chunk_lines=chunk_lines)
        return DocumentBatcher(source, vocab, rows, unroll, reset_rate=reset_rate, seed=seed)
    source = SentenceSource(files, seed=seed, shuffle=True, loop=True, shard=shard, chunk_lines=chunk_lines)
    if batching == "stream":
        return StreamBatcher(source, vocab, rows, unroll)
    if batching == "sentence":
        return SentenceBatcher(source, vocab, rows)
    raise InputError(f"--batching must be one of {', '.join(BATCHINGS)}, found {batching!r}")
