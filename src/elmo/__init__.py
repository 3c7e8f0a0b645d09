"""ELMo (Peters et al., NAACL 2018) in plain PyTorch: the exact biLM and the original model files."""

# First, before anything loads torch: OpenMP reads its waiting policy once, when torch loads (elmo.model.threads).
from elmo.model import threads  # noqa: F401  (isort: skip)
from elmo.allennlp.elmo_embedder import ElmoEmbedder
from elmo.allennlp.elmo_module import Elmo
from elmo.embed.embedder import Embedder
from elmo.files.layout import ModelFiles
from elmo.formats.manylangs import load_manylangs
from elmo.formats.weights import save_bilm
from elmo.model.bilm import (
    BiLM,
    BiLMOutput,
    CharEncoder,
    LstmLayer,
    LstmStack,
)
from elmo.model.boundaries import add_sentence_boundaries, remove_sentence_boundaries
from elmo.model.chars import batch_to_ids
from elmo.model.options import BiLMConfig, read_options
from elmo.model.scalar_mix import ScalarMix

from .errors import ElmoError, InputError, ModelFileError
from .models import load_bilm, load_model  # load_bilm: elmo.formats.weights.load_bilm, with URLs too

__all__ = [
    "BiLM", "BiLMOutput", "BiLMConfig", "CharEncoder", "Elmo", "ElmoEmbedder", "ElmoError", "Embedder", "InputError", "LstmLayer",
    "LstmStack", "ModelFileError", "ModelFiles", "ScalarMix", "add_sentence_boundaries", "batch_to_ids", "load_bilm",
    "load_manylangs", "load_model", "read_options", "remove_sentence_boundaries", "save_bilm",
]
__version__ = "0.1.0"
