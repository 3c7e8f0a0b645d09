"""Corpus reading and batching as bilm-tf does it (docs/format.md section 7, "Batching"): corpus.py reads,
batchers.py batches; this module names both (the import path the trainer, the tools and users know).

A `SentenceSource` yields sentences in a seeded, shuffled order that can be resumed exactly from a
small position record; it never holds more than one chunk of lines (a `DocumentSource` yields whole
documents, separated by blank lines, the same way). Four batchers (`--batching`), each a `Batcher`
(the protocol the trainer, the checkpoints and perplexity use):

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

from .batchers import (BATCHINGS, Batch, Batcher, DocumentBatcher, OrderedBatcher, SentenceBatcher, StreamBatcher,
                       make_batcher)
from .corpus import (CHUNK_LINES, MAX_LINE_BYTES, DocumentSource, SentenceSource, count_targets, expand_corpus,
                     head_counts, read_sentences)

__all__ = ["BATCHINGS", "CHUNK_LINES", "MAX_LINE_BYTES", "Batch", "Batcher", "DocumentBatcher", "DocumentSource",
           "OrderedBatcher", "SentenceBatcher", "SentenceSource", "StreamBatcher", "count_targets", "expand_corpus",
           "head_counts", "make_batcher", "read_sentences"]
