"""One model reference: whatever names a model (`--model`, `--options/--weights`, `from_model`,
`from_pretrained`, `load_model`, a URL given to `Elmo` or `load_bilm`) becomes a `Model` in one place,
`resolve`; everything past it receives local paths.

A `Model` loads a biLM (`load`) and, where its format has them, gives the original files
(`original_files`: options.json + weights.hdf5, for the commands that read or copy those files).

The kinds of reference, in three tuples at the end of the kinds below (the one place to add a kind):
- `DIRECTORY_KINDS`, `(path) -> Model | None`: what a local directory is (a training run, an
  ELMoForManyLangs model, the original format). `Model.from_path` tries these, so whatever a fetch
  kind fetched or unpacked is read the same way as a directory the user gave.
- `NAME_KINDS`, `(text) -> Model | None`: names of models shipped in the package.
- `FETCH_KINDS`, `(text) -> Fetched | None`: references whose files must first be fetched or unpacked
  (a catalog name, an archive URL). One returns the local files it made (a model directory, or an
  (options, weights) pair), never a model; `resolve` reads them with `Model.from_path`, `elmo download`
  prints them.
A kind returns None for a reference it does not recognise and raises for one it recognises but cannot
use. Fetching is elmo.hub's; its modules never import this one (no import cycle).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from elmo.files.fileio import check_file
from elmo.files.layout import (
    OPTIONS_NAME,
    SOFTMAX_NAME,
    VOCAB_NAME,
    WEIGHTS_NAME,
    ModelFiles,
    is_manylangs_dir,
    is_training_run,
)
from elmo.formats.manylangs import load_manylangs
from elmo.formats.nlpl import is_model_zip, nlpl_files
from elmo.formats.weights import load_bilm as load_local_bilm
from elmo.hub.reference_checks import shown
from elmo.model.bilm import BiLM
from elmo.model.int8 import quantize_bilm
from elmo.model.options import BiLMConfig

from .errors import InputError, ModelFileError, ModelFileNotFound
from .hub import find_published, is_url, local_path

BUNDLED_DIR = Path(__file__).parent / "bundled"
DEFAULT_MODEL = "default"
DEFAULT_DOCUMENT_MODEL = "default-document"  # the bundled model tuned on whole documents (docs/documents.md)
Fetched = Path | tuple[Path, Path]  # what a fetch kind made: a model directory, or (options, weights)
__all__ = ["BUNDLED_DIR", "DEFAULT_DOCUMENT_MODEL", "DEFAULT_MODEL", "DIRECTORY_KINDS", "NAME_KINDS", "OPTIONS_NAME",
           "FETCH_KINDS", "SOFTMAX_NAME", "VOCAB_NAME", "WEIGHTS_NAME", "ManyLangsModel", "Model", "ModelFiles",
           "OriginalModel", "TrainingRun", "bundled_models", "default_model_name", "download_reference", "load_bilm",
           "load_model", "local_file", "resolve"]


class Model:
    """A resolved model reference. `name`: what the user passed, for messages and saved task models."""

    name: str

    def load(self, stateful: bool = False) -> BiLM:
        raise NotImplementedError

    def load_int8(self, stateful: bool = False) -> BiLM:
        """The biLM for int8 inference, holding int8 weights only (`elmo.model.int8`). Formats read one part
        at a time override this so that the float32 model is never held whole."""
        bilm = self.load(stateful=stateful)
        quantize_bilm(bilm, keep_float32=False)
        return bilm

    def original_files(self) -> ModelFiles:
        """options.json + weights.hdf5, for what needs the original format; other formats refuse with what to use."""
        raise NotImplementedError

    @staticmethod
    def from_path(path: str | os.PathLike, name: str | None = None) -> Model:
        """A local model directory in either format; anything else is refused with what was expected."""
        text = os.fspath(path)
        for kind in DIRECTORY_KINDS:
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

    def load_int8(self, stateful: bool = False) -> BiLM:
        return load_bilm(self.files.options_file, self.files.weight_file, stateful=stateful, int8=True)

    def original_files(self) -> ModelFiles:
        return self.files


@dataclass(frozen=True)
class ManyLangsModel(Model):
    """An ELMoForManyLangs directory (src/elmo/formats/manylangs.py): loads as a biLM with its own lexicon."""

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
    return TrainingRun(Path(text), text) if is_training_run(text) else None


def _manylangs_dir(text: str) -> Model | None:
    return ManyLangsModel(Path(text), text) if os.path.isdir(text) and is_manylangs_dir(text) else None


def _original_dir(text: str) -> Model | None:
    return OriginalModel(ModelFiles.from_dir(text), text) if os.path.isdir(text) else None


def _bilm_tf_checkpoint(text: str) -> Model | None:
    """A bilm-tf run directory (options.json + `checkpoint`, the newest taken) or a TensorFlow checkpoint prefix,
    imported once into the cache with its softmax (src/elmo/tf/bilm_models.py)."""
    from elmo.tf.bilm_models import imported_model_dir, is_bilm_tf_reference

    return Model.from_path(imported_model_dir(text), name=text) if is_bilm_tf_reference(text) else None


def _tfhub_module(text: str) -> Model | None:
    """A TF-Hub module folder (TF1 Hub format: saved_model.pb + variables/), imported once into the cache in the
    original format with its layer mix beside (src/elmo/tf/hub_import.py)."""
    from elmo.tf.hub_import import imported_module_dir, is_hub_module

    return Model.from_path(imported_module_dir(text), name=text) if is_hub_module(text) else None


def _bundled(text: str) -> Model | None:
    if os.sep in text or not (BUNDLED_DIR / text / WEIGHTS_NAME).is_file():
        return None
    return OriginalModel(ModelFiles.from_dir(BUNDLED_DIR / text), text)


def _nlpl_dir(text: str) -> Model | None:
    """An NLPL download's folder: options.json beside model.hdf5 (or its one .hdf5 file), vocab.txt optional."""
    files = nlpl_files(text)
    return None if files is None else OriginalModel(ModelFiles(files.options_file, files.weight_file,
                                                               files.vocab_file), text)


def _local_zip(text: str) -> Fetched | None:
    """A local .zip holding a model (NLPL's downloads), unpacked once into the cache (src/elmo/hub/nlpl_zip.py)."""
    if not is_model_zip(text):
        return None
    from elmo.hub.nlpl_zip import unpacked_zip

    return unpacked_zip(text)


def _published(text: str) -> Fetched | None:
    """A published model by name (`elmo models`; src/elmo/hub/catalog.json), from a cache or downloaded."""
    published = find_published(text)
    if published is None:
        return None
    if published.format == "tfhub":  # a TF-Hub module: TF-Hub's cache, ours, or downloaded (src/elmo/tf/hub_handles.py)
        from elmo.tf.hub_handles import fetch_tfhub_module, parse_handle

        return fetch_tfhub_module(parse_handle(published.archive.url))
    if published.checkpoint_files:  # a bilm-tf checkpoint with its softmax: fetched, then imported once
        from elmo.tf.bilm_models import fetch_published_checkpoint

        return fetch_published_checkpoint(dict(published.checkpoint_files))
    from elmo.hub.published import fetch_published

    return fetch_published(published)


def _archive_url(text: str) -> Fetched | None:
    """The URL of an archive (.zip, .tar.gz, .tar.xz, .tar.bz2) holding one model directory, in either format."""
    if not is_url(text):
        return None
    from elmo.hub.published import fetch_model_url

    return fetch_model_url(text)


def _tfhub(text: str) -> Fetched | None:
    """A TF-Hub handle (https://tfhub.dev/google/elmo/3, Kaggle Models' forms) or a local module .tar.gz: the module
    folder from TF-Hub's cache, ours, or downloaded (src/elmo/tf/hub_handles.py); tried before _archive_url."""
    from elmo.tf.hub_handles import fetch_tfhub_module, is_module_archive, parse_handle, unpacked_module_archive

    if is_module_archive(text):
        return unpacked_module_archive(text)
    handle = parse_handle(text)
    return None if handle is None else fetch_tfhub_module(handle)


def _huggingface(text: str) -> Fetched | None:
    """hf://OWNER/REPO[@REVISION][/PATH]: a model folder in a Hugging Face Hub repository, through huggingface_hub's
    cache (src/elmo/hub/huggingface.py); tried before _archive_url, which would take it for a URL."""
    from elmo.hub.huggingface import hf_model_dir, is_hf_reference

    return hf_model_dir(text) if is_hf_reference(text) else None


def _fetched_model(found: Fetched, name: str) -> Model:
    """What a fetch kind made, as a model: a pair of files as they are, a directory by DIRECTORY_KINDS."""
    return OriginalModel(ModelFiles(*found), name) if isinstance(found, tuple) else Model.from_path(found, name=name)


# Every kind of reference, in the order `resolve` tries them: local directories first, so a folder named
# like a bundled or published model is that folder; then bundled models, so `default` is always the
# bundled one; then what must be fetched. A new kind is one function in one of these tuples.
DIRECTORY_KINDS: tuple[Callable[[str], Model | None], ...] = (_training_run, _manylangs_dir, _bilm_tf_checkpoint,
                                                                _tfhub_module, _nlpl_dir, _original_dir)
NAME_KINDS: tuple[Callable[[str], Model | None], ...] = (_bundled,)
FETCH_KINDS: tuple[Callable[[str], Fetched | None], ...] = (_local_zip, _published, _tfhub, _huggingface,
                                                              _archive_url)


def bundled_models() -> list[str]:
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / WEIGHTS_NAME).is_file())


def resolve(model: str | os.PathLike | Model | None = None, options: str | os.PathLike | None = None,
            weights: str | os.PathLike | None = None) -> Model:
    """`--model NAME|DIR` or `--options O --weights W` (default: the bundled default model) -> a `Model`.

    `model`: a bundled model's name, a directory in the original format (options.json + weights.hdf5)
    or ELMoForManyLangs' (config.json, char.dic / word.dic, *.pkl), a published model's name
    (`elmo models`), the URL of a model archive, a TF-Hub module (folder, .tar.gz or handle), or an already
    resolved `Model`. `options`/`weights`:
    paths or URLs. Remote files come from a cache or are downloaded (src/elmo/hub, docs/published-models.md).
    A training run's folder resolves to a `TrainingRun`, which refuses to load with the command that
    makes it a model; an unknown reference is refused with the bundled names.
    """
    if (options is None) != (weights is None):
        raise InputError("--options and --weights go together")
    if options is not None and model is not None:
        raise InputError("give either --model or --options/--weights, not both")
    if options is not None:
        files = ModelFiles(*(Path(check_file(local_file(p), "a model file")) for p in (options, weights)))
        return OriginalModel(files, f"{os.fspath(options)} + {os.fspath(weights)}")
    if isinstance(model, Model):
        return model
    text = os.fspath(model if model is not None else DEFAULT_MODEL)
    for kind in (*DIRECTORY_KINDS, *NAME_KINDS):
        found = kind(text)
        if found is not None:
            return found
    for fetch in FETCH_KINDS:
        fetched = fetch(text)
        if fetched is not None:
            return _fetched_model(fetched, text)
    available = bundled_models()
    looks_like_a_path = "://" not in text and (os.sep in text or text.startswith((".", "~")))
    error = ModelFileNotFound if looks_like_a_path and not os.path.exists(text) else ModelFileError
    raise error(f"{shown(text)}: neither a model directory nor a bundled model "
                f"(bundled: {', '.join(available) if available else 'none in this installation'}), "
                "nor a published model's name (`elmo models` lists them) or a URL")


def default_model_name(context: str = "sentence") -> str:
    """The bundled model that runs when none is named: `default-document` for document context (it was
    tuned to read sentences with their documents), `default` otherwise or where the document model is not
    installed."""
    if context == "document" and DEFAULT_DOCUMENT_MODEL in bundled_models():
        return DEFAULT_DOCUMENT_MODEL
    return DEFAULT_MODEL


def load_model(model: str | os.PathLike | Model = DEFAULT_MODEL, stateful: bool = False) -> BiLM:
    """Any model this package reads, as a BiLM (see `resolve` for what `model` may be)."""
    return resolve(model).load(stateful=stateful)


def local_file(path_or_url: str | os.PathLike) -> str | os.PathLike:
    """One model file: a path as it is, a URL or an hf:// file reference fetched (from a cache or downloaded) and
    its local path."""
    if isinstance(path_or_url, str) and path_or_url.startswith("hf://"):
        from elmo.hub.huggingface import hf_file

        return hf_file(path_or_url)
    return local_path(path_or_url)


def load_bilm(options_file: str | os.PathLike | BiLMConfig, weight_file: str | os.PathLike | None,
              stateful: bool = False, int8: bool = False) -> BiLM:
    """`elmo.load_bilm`: `elmo.formats.weights.load_bilm` (which reads local files only) with URLs taken too."""
    if not isinstance(options_file, BiLMConfig):
        options_file = local_file(options_file)
    return load_local_bilm(options_file, None if weight_file is None else local_file(weight_file), stateful=stateful,
                           int8=int8)


def download_reference(reference: str) -> list[Path]:
    """`elmo download`: a published model or a URL (of a model archive, or of one file) into the cache;
    the local paths, without loading anything."""
    from elmo.hub.archives import is_archive_name
    from elmo.hub.fetch import check_url, fetch
    from elmo.tf.hub_handles import parse_handle

    if is_url(reference) and reference.lower().startswith(("http://", "https://")):
        check_url(reference)  # before urlsplit's own ValueError (e.g. an unclosed [IPv6 host)
    parts = urlsplit(reference)
    if (is_url(reference) and parts.scheme.lower() in ("http", "https") and not is_archive_name(parts.path)
            and parse_handle(reference) is None):
        return [fetch(reference)]  # one file, which is not a model by itself
    for fetch_kind in FETCH_KINDS:
        fetched = fetch_kind(reference)
        if fetched is not None:
            return list(fetched) if isinstance(fetched, tuple) else [fetched]
    raise ModelFileError(f"{shown(reference)}: not a published model's name nor a URL (`elmo models` lists the names)")
