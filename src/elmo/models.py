"""Where model files live: a model directory, or a model bundled with the package, by name.

A directory is either the original format (options.json + weights.hdf5) or an ELMoForManyLangs
model (config.json, char.dic / word.dic, token_embedder.pkl, encoder.pkl), told apart by its files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import InputError, ModelFileError
from .fileio import check_file
from .manylangs import is_manylangs_dir

if TYPE_CHECKING:
    from .bilm import BiLM

BUNDLED_DIR = Path(__file__).parent / "bundled"
OPTIONS_NAME, WEIGHTS_NAME, VOCAB_NAME, SOFTMAX_NAME = "options.json", "weights.hdf5", "vocab.txt", "softmax.hdf5"


@dataclass(frozen=True)
class ModelFiles:
    """The files of one model; `vocab_file` and `softmax_file` exist only for LM scoring."""

    options_file: Path
    weight_file: Path
    vocab_file: Path | None = None
    softmax_file: Path | None = None

    @classmethod
    def from_dir(cls, directory: str | os.PathLike) -> ModelFiles:
        d = Path(directory)
        if not d.is_dir():
            raise ModelFileError(f"{d}: not a model directory")
        if is_manylangs_dir(d):
            raise ModelFileError(f"{d}: an ELMoForManyLangs model directory, which loads with Embedder.from_model, "
                                 f"Elmo.from_pretrained, elmo.load_model or `elmo embed --model`; this needs a model "
                                 f"in the original format ({OPTIONS_NAME} + {WEIGHTS_NAME})")
        for name in (OPTIONS_NAME, WEIGHTS_NAME):
            if not (d / name).is_file():
                raise ModelFileError(f"{d}: a model directory needs {OPTIONS_NAME} and {WEIGHTS_NAME}; {name} is missing")
        optional = [d / n if (d / n).is_file() else None for n in (VOCAB_NAME, SOFTMAX_NAME)]
        return cls(d / OPTIONS_NAME, d / WEIGHTS_NAME, *optional)


def bundled_models() -> list[str]:
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / WEIGHTS_NAME).is_file())


def resolve_model(name_or_dir: str | os.PathLike) -> ModelFiles:
    """A bundled model's name (e.g. "default") or a model directory -> its files."""
    text = os.fspath(name_or_dir)
    if os.path.isdir(text):
        return ModelFiles.from_dir(text)
    if (BUNDLED_DIR / text / WEIGHTS_NAME).is_file():
        return ModelFiles.from_dir(BUNDLED_DIR / text)
    available = bundled_models()
    raise ModelFileError(
        f"{text}: neither a model directory nor a bundled model "
        f"(bundled: {', '.join(available) if available else 'none in this installation'})"
    )


def load_model(name_or_dir: str | os.PathLike, stateful: bool = False) -> BiLM:
    """Any model this package reads, as a BiLM: a bundled model's name, a directory in the original
    format, or an ELMoForManyLangs directory (detected by its files; src/elmo/manylangs.py)."""
    from .manylangs import load_manylangs
    from .weights import load_bilm

    if os.path.isdir(name_or_dir) and is_manylangs_dir(name_or_dir):
        return load_manylangs(name_or_dir, stateful=stateful)
    files = resolve_model(name_or_dir)
    return load_bilm(files.options_file, files.weight_file, stateful=stateful)


def choose_model(model: str | os.PathLike | None = None, options: str | os.PathLike | None = None,
                 weights: str | os.PathLike | None = None, manylangs: bool = False) -> ModelFiles | Path:
    """The one way every command reads `--model NAME|DIR` or `--options O --weights W` (default: the
    bundled default model). A training run's folder is refused with the command that makes it a model.
    `manylangs`: the caller also reads ELMoForManyLangs directories (`Embedder.from_model`, `load_model`),
    which come back as their path; otherwise `ModelFiles.from_dir` refuses them with what to use instead."""
    if (options is None) != (weights is None):
        raise InputError("--options and --weights go together")
    if options is not None and model is not None:
        raise InputError("give either --model or --options/--weights, not both")
    if options is not None:
        for path in (options, weights):
            check_file(path, "a model file")
        return ModelFiles(Path(options), Path(weights))
    model = os.fspath(model or "default")
    if manylangs and os.path.isdir(model) and is_manylangs_dir(model):
        return Path(model)
    # run.json / checkpoints/ are what `elmo train` writes (training/settings.py)
    if os.path.isdir(model) and not os.path.isfile(os.path.join(model, WEIGHTS_NAME)) and (
            os.path.isfile(os.path.join(model, "run.json")) or os.path.isdir(os.path.join(model, "checkpoints"))):
        raise ModelFileError(f"{model}: a training run, not a model directory; make one with "
                             f"`elmo export {model} -o MODEL_DIR` and pass that")
    return resolve_model(model)
