"""ELMo (Peters et al., NAACL 2018) in plain PyTorch: the exact biLM and the original model files."""

# First, before anything loads torch: OpenMP reads its waiting policy once, when torch loads (elmo.threads).
from . import threads  # noqa: F401  (isort: skip)
from .bilm import (
    BiLM,
    BiLMOutput,
    CharEncoder,
    LstmLayer,
    LstmStack,
    add_sentence_boundaries,
    remove_sentence_boundaries,
)
from .chars import batch_to_ids
from .elmo_module import Elmo
from .embedder import Embedder
from .errors import ElmoError, InputError, ModelFileError
from .allennlp09_embedder import ElmoEmbedder
from .manylangs import load_manylangs
from .models import ModelFiles, load_bilm, load_model  # load_bilm: elmo.weights.load_bilm, with URLs too
from .options import BiLMConfig, read_options
from .scalar_mix import ScalarMix
from .weights import save_bilm

__all__ = [
    "BiLM", "BiLMOutput", "BiLMConfig", "CharEncoder", "Elmo", "ElmoEmbedder", "ElmoError", "Embedder", "InputError", "LstmLayer",
    "LstmStack", "ModelFileError", "ModelFiles", "ScalarMix", "add_sentence_boundaries", "batch_to_ids", "load_bilm",
    "load_manylangs", "load_model", "read_options", "remove_sentence_boundaries", "save_bilm",
]
__version__ = "0.1.0"
