"""SeqVec's files: by name from the catalog, from a model directory as bio_embeddings and SeqVec lay it out, and a
SeqVec-shaped model with random weights (for tests, benchmarks and reference scripts, which cannot download 360 MB).

SeqVec is a standard AllenNLP ELMo: its options.json gives the shapes of the `original` English model (char CNN with
2048 filters and 2 highway layers, 2 LSTM layers of 4096 cells projected to 512, skip connections), so each of its
three layers is 1024-dimensional per residue (Heinzinger et al. 2019, Fig. 4; bio_embeddings'
`SeqVecEmbedder.embedding_dimension = 1024`, `number_of_layers = 3`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from elmo.errors import ModelFileError, ModelFileNotFound
from elmo.files.layout import ModelFiles
from elmo.formats.weights import dataset_map, save_bilm
from elmo.model.bilm import BiLM
from elmo.model.options import BiLMConfig
from elmo.models import resolve

SEQVEC_MODEL = "seqvec"  # the catalog's name (src/elmo/hub/catalog.json)
SEQVEC_OPTIONS = {
    "lstm": {"use_skip_connections": True, "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096,
             "n_layers": 2},
    "char_cnn": {"activation": "relu", "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                 "n_highway": 2, "embedding": {"dim": 16}, "n_characters": 262, "max_characters_per_token": 50},
}
# A model directory: SeqVec's zip and README name the files options.json / weights.hdf5; bio_embeddings'
# `model_directory` joins the names options_file / weights_file.
DIRECTORY_NAMES = (("options.json", "weights.hdf5"), ("options_file", "weights_file"))


def seqvec_files(options_file: str | os.PathLike | None = None, weights_file: str | os.PathLike | None = None,
                 model_directory: str | os.PathLike | None = None) -> ModelFiles:
    """The two files as bio_embeddings' `SeqVecEmbedder(**kwargs)` takes them; none given: `seqvec` from the catalog
    (a cache, or downloaded and checked against its published md5s)."""
    if model_directory is not None:
        if options_file is not None or weights_file is not None:
            raise ModelFileError("give model_directory, or options_file and weights_file, not both")
        folder = Path(model_directory)
        for options_name, weights_name in DIRECTORY_NAMES:
            if (folder / options_name).is_file() and (folder / weights_name).is_file():
                return ModelFiles(folder / options_name, folder / weights_name)
        raise ModelFileNotFound(f"model_directory={os.fspath(model_directory)}: expected options.json + weights.hdf5 "
                                "(SeqVec's zip) or options_file + weights_file (bio_embeddings' layout) in it")
    if (options_file is None) != (weights_file is None):
        raise ModelFileError("give both options_file and weights_file, or neither (SeqVec from the catalog)")
    if options_file is not None:
        return resolve(options=options_file, weights=weights_file).original_files()
    return resolve(SEQVEC_MODEL).original_files()


def random_bilm(options: dict | None = None, seed: int = 0) -> BiLM:
    """A biLM at `options`' shapes (default SeqVec's) with weights drawn from numpy's generator `seed`.

    The same seed gives the same weights whatever torch's initialisation does, so a reference made by another
    library from the written files stays valid. Matrices are N(0, 1/fan_in), biases N(0, 0.01): activations stay in
    the range a trained model has rather than saturating every gate.
    """
    bilm = BiLM(BiLMConfig.from_options(options or SEQVEC_OPTIONS, "the SeqVec-shaped options"), initialize=False)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, (param, shape) in sorted(dataset_map(bilm).items()):
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 0
            scale = 1 / np.sqrt(fan_in) if fan_in else 0.1
            values = rng.standard_normal(tuple(param.shape), dtype=np.float32) * np.float32(scale)
            param.copy_(torch.from_numpy(values))
    return bilm.eval()


def write_random_model(directory: str | os.PathLike, options: dict | None = None, seed: int = 0) -> ModelFiles:
    """options.json + weights.hdf5 of `random_bilm(options, seed)` in `directory` (made if absent)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    files = ModelFiles(folder / "options.json", folder / "weights.hdf5")
    save_bilm(random_bilm(options, seed), files.options_file, files.weight_file)
    return files
