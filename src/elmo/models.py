"""One model reference: whatever names a model (`--model`, `--options/--weights`, `from_model`,
`from_pretrained`, `load_model`) becomes a `Model` in one place, `resolve`.

A `Model` loads a biLM (`load`) and, where its format has them, gives the original files
(`original_files`: options.json + weights.hdf5, for the commands that read or copy those files).
Every kind of reference is recognised by one function in `KINDS`, tried in order; a new kind (a
catalog name, a URL, an archive) is one more function there, `(text) -> Model | None`, that returns
None for a reference it does not recognise. A remote kind fetches into a local path and returns
`Model.from_path(local_path)`; the helpers it calls must not import this module (no import cycle).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .bilm import BiLM
from .errors import InputError, ModelFileError
from .fileio import check_file
from .hub import find_published, is_url, local_path
from .manylangs import is_manylangs_dir, load_manylangs
from .options import OPTIONS_NAME
from .training.settings import CHECKPOINT_DIR, RUN_FILE
from .training.softmax import SOFTMAX_NAME
from .training.vocab import VOCAB_NAME
from .weights import WEIGHTS_NAME, load_bilm

BUNDLED_DIR = Path(__file__).parent / "bundled"
DEFAULT_MODEL = "default"
__all__ = ["BUNDLED_DIR", "DEFAULT_MODEL", "KINDS", "OPTIONS_NAME", "SOFTMAX_NAME", "VOCAB_NAME", "WEIGHTS_NAME",
           "ManyLangsModel", "Model", "ModelFiles", "OriginalModel", "TrainingRun", "bundled_models", "load_model",
           "resolve"]


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
                raise ModelFileError(f"{d}: a model directory needs {OPTIONS_NAME} and {WEIGHTS_NAME}; {name} is missing")
        optional = [d / n if (d / n).is_file() else None for n in (VOCAB_NAME, SOFTMAX_NAME)]
        return cls(d / OPTIONS_NAME, d / WEIGHTS_NAME, *optional)


class Model:
    """A resolved model reference. `name`: what the user passed, for messages and saved task models."""

    name: str

    def load(self, stateful: bool = False) -> BiLM:
        raise NotImplementedError

    def original_files(self) -> ModelFiles:
        """options.json + weights.hdf5, for what needs the original format; other formats refuse with what to use."""
        raise NotImplementedError

    @staticmethod
    def from_path(path: str | os.PathLike, name: str | None = None) -> Model:
        """A local model directory in either format; anything else is refused with what was expected."""
        text = os.fspath(path)
        for kind in (_training_run, _manylangs_dir, _original_dir):
            model = kind(text)
            if model is not None:
                return model if name is None else dataclasses.replace(model, name=name)
        raise ModelFileError(f"{text}: not a model directory")


@dataclass(frozen=True)
class OriginalModel(Model):
    """options.json + weights.hdf5 (a directory, a bundled model or an explicit pair of files)."""

    files: ModelFiles
    name: str

    def load(self, stateful: bool = False) -> BiLM:
        return load_bilm(self.files.options_file, self.files.weight_file, stateful=stateful)

    def original_files(self) -> ModelFiles:
        return self.files


@dataclass(frozen=True)
class ManyLangsModel(Model):
    """An ELMoForManyLangs directory (src/elmo/manylangs.py): loads as a biLM with its own lexicon."""

    directory: Path
    name: str

    def load(self, stateful: bool = False) -> BiLM:
        return load_manylangs(self.directory, stateful=stateful)

    def original_files(self) -> ModelFiles:
        raise ModelFileError(f"{self.directory}: an ELMoForManyLangs model directory, which loads with "
                             "Embedder.from_model, Elmo.from_pretrained, elmo.load_model or `elmo embed --model`; "
                             f"this needs a model in the original format ({OPTIONS_NAME} + {WEIGHTS_NAME})")


@dataclass(frozen=True)
class TrainingRun(Model):
    """A folder `elmo train` writes: not a model until exported (`elmo perplexity` reads it as it is)."""

    directory: Path
    name: str

    def load(self, stateful: bool = False) -> BiLM:
        raise self._refusal()

    def original_files(self) -> ModelFiles:
        raise self._refusal()

    def _refusal(self) -> ModelFileError:
        return ModelFileError(f"{self.name}: a training run, not a model directory; make one with "
                              f"`elmo export {self.name} -o MODEL_DIR` and pass that")


def _training_run(text: str) -> Model | None:
    d = Path(text)
    if d.is_dir() and not (d / WEIGHTS_NAME).is_file() and ((d / RUN_FILE).is_file() or (d / CHECKPOINT_DIR).is_dir()):
        return TrainingRun(d, text)
    return None


def _manylangs_dir(text: str) -> Model | None:
    return ManyLangsModel(Path(text), text) if os.path.isdir(text) and is_manylangs_dir(text) else None


def _original_dir(text: str) -> Model | None:
    return OriginalModel(ModelFiles.from_dir(text), text) if os.path.isdir(text) else None


def _bundled(text: str) -> Model | None:
    if os.sep in text or not (BUNDLED_DIR / text / WEIGHTS_NAME).is_file():
        return None
    return OriginalModel(ModelFiles.from_dir(BUNDLED_DIR / text), text)


def _published(text: str) -> Model | None:
    """A published model by name (`elmo models`; src/elmo/hub/catalog.json), from a cache or downloaded."""
    published = find_published(text)
    if published is None:
        return None
    from .hub.published import fetch_published

    found = fetch_published(published)
    return OriginalModel(ModelFiles(*found), text) if isinstance(found, tuple) else Model.from_path(found, name=text)


def _url(text: str) -> Model | None:
    """The URL of an archive (.zip, .tar.gz, .tar.xz, .tar.bz2) holding one model directory, in either format."""
    if not is_url(text):
        return None
    from .hub.published import fetch_model_url

    return Model.from_path(fetch_model_url(text), name=text)


# Every kind of reference, in the order tried: local directories first, so a folder named like a
# bundled or published model is that folder; then bundled models, so `default` is always the bundled one.
KINDS: tuple[Callable[[str], Model | None], ...] = (_training_run, _manylangs_dir, _original_dir, _bundled,
                                                    _published, _url)


def bundled_models() -> list[str]:
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / WEIGHTS_NAME).is_file())


def resolve(model: str | os.PathLike | Model | None = None, options: str | os.PathLike | None = None,
            weights: str | os.PathLike | None = None) -> Model:
    """`--model NAME|DIR` or `--options O --weights W` (default: the bundled default model) -> a `Model`.

    `model`: a bundled model's name, a directory in the original format (options.json + weights.hdf5)
    or ELMoForManyLangs' (config.json, char.dic / word.dic, *.pkl), a published model's name
    (`elmo models`), the URL of a model archive, or an already resolved `Model`. `options`/`weights`:
    paths or URLs. Remote files come from a cache or are downloaded (src/elmo/hub, docs/published-models.md).
    A training run's folder resolves to a `TrainingRun`, which refuses to load with the command that
    makes it a model; an unknown reference is refused with the bundled names.
    """
    if (options is None) != (weights is None):
        raise InputError("--options and --weights go together")
    if options is not None and model is not None:
        raise InputError("give either --model or --options/--weights, not both")
    if options is not None:
        files = ModelFiles(*(Path(check_file(local_path(p), "a model file")) for p in (options, weights)))
        return OriginalModel(files, f"{os.fspath(options)} + {os.fspath(weights)}")
    if isinstance(model, Model):
        return model
    text = os.fspath(model if model is not None else DEFAULT_MODEL)
    for kind in KINDS:
        found = kind(text)
        if found is not None:
            return found
    available = bundled_models()
    raise ModelFileError(f"{text}: neither a model directory nor a bundled model "
                         f"(bundled: {', '.join(available) if available else 'none in this installation'}), "
                         "nor a published model's name (`elmo models` lists them) or a URL")


def load_model(model: str | os.PathLike | Model = DEFAULT_MODEL, stateful: bool = False) -> BiLM:
    """Any model this package reads, as a BiLM (see `resolve` for what `model` may be)."""
    return resolve(model).load(stateful=stateful)
