"""Downstream tasks and the paper's layer analysis, against a static-embedding baseline.

Task models take ELMo as the paper does (frozen biLM, a learned scalar mix per task, concatenated
with the task's own word representation, optionally also at the encoder output), trained on
features cached once per data set. `load_tagger(path).predict(tokens)` runs a trained tagger.

May import: elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model, elmo.models,
elmo.tf.
"""

from .crf import CRF, bio_constraints
from .features import ElmoSpec, FeatureCache, build_cache
from .metrics import accuracy, span_f1
from .predict import TaskModel, load_tagger, load_task_model
from .readers import Example, iob1_to_iob2, read_conll2000, read_conll2003, read_conllu, read_sst, read_task_file
from .train import TASKS, TrainOptions, run_task

__all__ = [
    "CRF", "ElmoSpec", "Example", "FeatureCache", "TASKS", "TaskModel", "TrainOptions", "accuracy", "bio_constraints",
    "build_cache", "iob1_to_iob2", "load_tagger", "load_task_model", "read_conll2000", "read_conll2003",
    "read_conllu", "read_sst", "read_task_file", "run_task", "span_f1",
]
