"""TensorFlow's side of ELMo without TensorFlow: V2 checkpoints read in numpy, bilm-tf's checkpoints as models.

May import: elmo_char_ids, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model.
"""

from .checkpoint import TFCheckpoint, checkpoint_prefix, is_checkpoint_prefix, latest_checkpoint

__all__ = ["TFCheckpoint", "checkpoint_prefix", "is_checkpoint_prefix", "latest_checkpoint"]
