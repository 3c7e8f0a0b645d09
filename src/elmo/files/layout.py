"""Where a model's files are: the names in a model directory or a training run, and what a directory is.

The bottom floor: it imports nothing of the package but its errors, so every layer (weights, the
ELMoForManyLangs loader, training, the hub's archives, the resolver in `elmo.models`) can ask it.
Names only, no loading: what a file holds is the business of the module that reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from elmo.errors import ModelFileError, ModelFileNotFound

# A model directory in the original format (doc section 3); vocab and softmax only for LM scoring.
OPTIONS_NAME = "options.json"
WEIGHTS_NAME = "weights.hdf5"
SOFTMAX_NAME = "softmax.hdf5"
VOCAB_NAME = "vocab.txt"

# A training run (`elmo train --out RUN`): options and vocab as above, plus these.
RUN_FILE, METRICS_FILE, CHECKPOINT_DIR = "run.json", "metrics.jsonl", "checkpoints"

# An NLPL download (src/elmo/formats/nlpl.py): options.json + model.hdf5, vocab.txt and meta.json optional.
NLPL_WEIGHTS, META_NAME = "model.hdf5", "meta.json"

# An ELMoForManyLangs model directory (src/elmo/formats/manylangs.py).
MANYLANGS_CONFIG, CHAR_DIC, WORD_DIC = "config.json", "char.dic", "word.dic"
TOKEN_EMBEDDER_PKL, ENCODER_PKL = "token_embedder.pkl", "encoder.pkl"

MODEL_DIR_DEPTH = 3  # archives put the model at the top or one or two folders down

CACHE_ENV = "ELMO_CACHE"  # where downloads (elmo.hub.cache) and int8 stores (elmo.formats.int8_store) are kept


def cache_root() -> Path:
    """$ELMO_CACHE, else the platform's user cache folder (~/.cache/elmo on Linux)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("elmo", appauthor=False))


@dataclass(frozen=True)
class ModelFiles:
    """The files of one model in the original format; `vocab_file` and `softmax_file` exist only for LM scoring."""

    options_file: Path
    weight_file: Path
    vocab_file: Path | None = None
    softmax_file: Path | None = None

    @classmethod
    def from_dir(cls, directory: str | os.PathLike) -> ModelFiles:
        d = Path(directory)
        for name in (OPTIONS_NAME, WEIGHTS_NAME):
            if not (d / name).is_file():
                raise ModelFileNotFound(f"{d}: a model directory needs {OPTIONS_NAME} and {WEIGHTS_NAME}; {name} is missing")
        optional = [d / n if (d / n).is_file() else None for n in (VOCAB_NAME, SOFTMAX_NAME)]
        return cls(d / OPTIONS_NAME, d / WEIGHTS_NAME, *optional)


def is_original_dir(path: str | os.PathLike) -> bool:
    """options.json + weights.hdf5 side by side."""
    d = Path(path)
    return (d / OPTIONS_NAME).is_file() and (d / WEIGHTS_NAME).is_file()


def is_training_run(path: str | os.PathLike) -> bool:
    """A folder `elmo train` writes (run.json or checkpoints/), not yet exported (no weights.hdf5)."""
    d = Path(path)
    return d.is_dir() and not (d / WEIGHTS_NAME).is_file() and ((d / RUN_FILE).is_file() or (d / CHECKPOINT_DIR).is_dir())


def is_manylangs_dir(path: str | os.PathLike) -> bool:
    """Their files, not the original format's: a .pkl of theirs, or config.json beside a .dic.

    Loose on purpose, so that a directory missing one of their files is still recognised and the
    loader can say which file is missing.
    """
    d = Path(path)
    if (d / OPTIONS_NAME).exists() or (d / WEIGHTS_NAME).exists():
        return False
    names = (MANYLANGS_CONFIG, ENCODER_PKL, TOKEN_EMBEDDER_PKL, CHAR_DIC, WORD_DIC)
    has = {name for name in names if (d / name).is_file()}
    return bool(has & {ENCODER_PKL, TOKEN_EMBEDDER_PKL}) or (MANYLANGS_CONFIG in has and bool(has & {CHAR_DIC, WORD_DIC}))


def nlpl_weights(path: str | os.PathLike) -> Path | None:
    """The weights of an NLPL download's folder (src/elmo/formats/nlpl.py): options.json beside model.hdf5, or beside
    its one .hdf5 file other than softmax.hdf5; None for any other folder, and for one with weights.hdf5
    (the original format). Several candidate .hdf5 files are an error that names them."""
    d = Path(path)
    if not d.is_dir() or not (d / OPTIONS_NAME).is_file() or (d / WEIGHTS_NAME).is_file():
        return None
    if (d / NLPL_WEIGHTS).is_file():
        return d / NLPL_WEIGHTS
    found = sorted(p for p in d.glob("*.hdf5") if p.is_file() and p.name != SOFTMAX_NAME)
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise ModelFileError(f"{d}: {OPTIONS_NAME} beside {len(found)} .hdf5 files ({names}); which holds the "
                             f"weights? Name it {NLPL_WEIGHTS} (or {WEIGHTS_NAME})")
    return found[0] if found else None


def is_model_dir(path: str | os.PathLike) -> bool:
    """A directory that holds a model in a format this package loads."""
    return is_original_dir(path) or is_manylangs_dir(path) or nlpl_weights(path) is not None


def model_dir_in(folder: Path, source: str) -> Path:
    """The single folder under `folder` (an unpacked archive from `source`) that holds a model."""
    found = []
    for current, dirs, _files in os.walk(folder):
        depth = len(Path(current).relative_to(folder).parts)
        if depth >= MODEL_DIR_DEPTH:
            dirs[:] = []
        dirs.sort()
        if is_model_dir(current):
            found.append(Path(current))
    if len(found) != 1:
        what = "no model directory" if not found else f"{len(found)} model directories"
        raise ModelFileError(f"{source}: the archive holds {what} (expected one folder with {OPTIONS_NAME} + "
                             f"{WEIGHTS_NAME}, or an ELMoForManyLangs model); unpacked in {folder}")
    return found[0]
