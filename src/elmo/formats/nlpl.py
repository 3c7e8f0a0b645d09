"""Models from the NLPL vector repository (vectors.nlpl.eu/repository), in bilm-tf's format as published.

An NLPL ELMo download is a zip of options.json + model.hdf5, often with vocab.txt (the LM's
vocabulary, not needed for vectors) and meta.json (the repository's record: corpus, language,
lemmatization, ...). simple_elmo also takes a folder whose one .hdf5 file has another name. Their
options.json may say `n_characters: 261` (bilm-tf's training value): the weights are the same, and
this package reads both 261 and 262. Nothing here reads a weight; `elmo.models.resolve` turns these
files into a model.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elmo.errors import ModelFileError
from elmo.files.fileio import read_json
from elmo.files.layout import META_NAME, OPTIONS_NAME, VOCAB_NAME, nlpl_weights


@dataclass(frozen=True)
class NLPLFiles:
    """An NLPL-shaped model folder: its options, its weights, and the optional vocabulary and meta.json."""

    options_file: Path
    weight_file: Path
    vocab_file: Path | None = None
    meta_file: Path | None = None


def nlpl_files(directory: str | os.PathLike) -> NLPLFiles | None:
    """The files of an NLPL-shaped folder (options.json beside model.hdf5, or beside its one .hdf5 file);
    None for any other folder. Several candidate .hdf5 files are refused, naming them (elmo.files.layout)."""
    weights = nlpl_weights(directory)
    if weights is None:
        return None
    d = weights.parent
    vocab = d / VOCAB_NAME if (d / VOCAB_NAME).is_file() else None
    meta = d / META_NAME if (d / META_NAME).is_file() else None
    return NLPLFiles(d / OPTIONS_NAME, weights, vocab, meta)


def is_nlpl_dir(directory: str | os.PathLike) -> bool:
    return nlpl_files(directory) is not None


def is_model_zip(path: str | os.PathLike) -> bool:
    """A local .zip file (NLPL's downloads), by name and by its first bytes."""
    p = Path(path)
    return p.suffix.lower() == ".zip" and p.is_file() and zipfile.is_zipfile(p)


def meta_facts(meta_file: str | os.PathLike) -> dict[str, str]:
    """meta.json's facts worth showing, as short strings: the repository id, the algorithm, and the
    corpus' description, language, lemmatization and size (NLPL nests the corpus as a list of records;
    the first is shown). Keys it does not have are left out; a file that is not JSON is an error."""
    meta = read_json(os.fspath(meta_file), "meta.json")
    if not isinstance(meta, dict):
        raise ModelFileError(f"{os.fspath(meta_file)}: expected a JSON object, found {type(meta).__name__}")
    facts = {key: str(meta[key]) for key in ("id", "handle", "dimensions") if _scalar(meta.get(key))}
    algorithm = meta.get("algorithm")
    if isinstance(algorithm, dict) and _scalar(algorithm.get("name")):
        facts["algorithm"] = str(algorithm["name"])
    corpora = meta.get("corpus")
    corpus = corpora[0] if isinstance(corpora, list) and corpora else corpora
    if isinstance(corpus, dict):
        for key, shown in (("description", "corpus"), ("language", "language"), ("lemmatized", "lemmatized"),
                           ("tokens", "tokens")):
            if _scalar(corpus.get(key)):
                facts[shown] = str(corpus[key])
    return facts


def _scalar(value: object) -> bool:
    return value is not None and not isinstance(value, (dict, list))
