"""Training biLMs the way bilm-tf did (docs/format.md section 7): vocabulary, data streams, losses, the loop,
export to the original model files, and held-out perplexity.

Modules: vocab (build/load the vocabulary), corpus (a seeded, resumable stream of sentences or documents, one
chunk of lines in memory), batchers (the `Batcher` protocol and its four batchers, `--batching`: sentence,
stream, ordered, document), softmax (full and sampled), model (the two LMs sharing the char CNN and softmax),
presets, settings (a run's options and run.json), checkpoint, distributed, trainer (the loop), export, perplexity.

May import: elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model, elmo.models,
elmo.tf.
"""

from elmo.errors import ElmoError


class TrainingError(ElmoError, RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says where and what is kept."""
