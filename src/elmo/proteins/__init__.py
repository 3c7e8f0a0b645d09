"""Proteins: SeqVec (ELMo trained on UniRef50) by name, with bio_embeddings' and AllenNLP 0.9's APIs, FASTA in and
bio_embeddings' HDF5 files out (docs/proteins.md). Imports no FASTA parser until a FASTA file is read.

May import: elmo.allennlp, elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model,
elmo.models, elmo.tf.
"""

from .model_files import SEQVEC_MODEL, SEQVEC_OPTIONS, seqvec_files, write_random_model
from .seqvec import DEFAULT_MAX_AMINO_ACIDS, WARMUP_SEQUENCE, ElmoEmbedder, SeqVecEmbedder

__all__ = ["DEFAULT_MAX_AMINO_ACIDS", "SEQVEC_MODEL", "SEQVEC_OPTIONS", "WARMUP_SEQUENCE", "ElmoEmbedder",
           "SeqVecEmbedder", "seqvec_files", "write_random_model"]
