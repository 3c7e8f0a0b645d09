"""The old name of `elmo.allennlp09_embedder` (AllenNLP 0.9's `ElmoEmbedder`), kept so that
`from elmo.legacy import ElmoEmbedder` goes on working: both names are the one module."""

import sys

from . import allennlp09_embedder

sys.modules[__name__] = allennlp09_embedder
