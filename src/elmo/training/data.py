"""Corpus reading and batching as bilm-tf does it (docs/format.md section 7, "Batching"): corpus.py reads,
batchers.py batches; this module names both (the import path the trainer, the tools and users know).

A `SentenceSource` yields sentences in a seeded, shuffled order that can be resumed exactly from a
small position record; it never holds more than one chunk of lines (a `DocumentSource` yields whole
documents, separated by blank lines, the same way). Four batchers (`--batching`), each a `Batcher`
(the protocol the trainer, the checkpoints and perplexity use):

`SentenceBatcher` (`sentence`, the default), `StreamBatcher` (`stream`, bilm-tf's), `OrderedBatcher`
(`ordered`, Kim et al.'s) and `DocumentBatcher` (`document`); what each does is in batchers.py.
"""

from __future__ import annotations

from .batchers import (
                       BATCHINGS,
                       Batch,
                       Batcher,
                       DocumentBatcher,
                       OrderedBatcher,
                       SentenceBatcher,
                       StreamBatcher,
                       make_batcher,
)
from .corpus import (
                       CHUNK_LINES,
                       MAX_LINE_BYTES,
                       DocumentSource,
                       SentenceSource,
                       count_targets,
                       expand_corpus,
                       head_counts,
                       read_sentences,
)

__all__ = ["BATCHINGS", "CHUNK_LINES", "MAX_LINE_BYTES", "Batch", "Batcher", "DocumentBatcher", "DocumentSource",
           "OrderedBatcher", "SentenceBatcher", "SentenceSource", "StreamBatcher", "count_targets", "expand_corpus",
           "head_counts", "make_batcher", "read_sentences"]
