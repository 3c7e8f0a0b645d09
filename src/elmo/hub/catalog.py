"""The published ELMo models as data (catalog.json): names, aliases (flair's too), URLs and known facts.

The facts and where each was seen are in the project's research notes (docs/published-models.md in
the shared reference material); tests/test_hub_catalog.py checks every URL here against them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from elmo.errors import ModelFileError

CATALOG_FILE = Path(__file__).with_name("catalog.json")

# One S3 object, two spellings: path style (the ELMo page, flair, allennlp <= 0.8.4) and virtual-host
# style (allennlp >= 0.8.5). The virtual-host one is canonical (research notes, sections 1.1 and 3).
S3_PATH_STYLE = "https://s3-us-west-2.amazonaws.com/allennlp/"
S3_VIRTUAL_HOST = "https://allennlp.s3.amazonaws.com/"


@dataclass(frozen=True)
class RemoteFile:
    """One published file: its URL and, where published or observed, its size and checksums."""

    url: str
    size: int | None = None
    md5: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class FactSource:
    """Where one fact of an entry was read: the page and the words that say it (recorded, never fetched)."""

    fact: str
    url: str
    says: str


@dataclass(frozen=True)
class PublishedModel:
    """A catalog entry. `format` is "allennlp" (options + weights files), "manylangs" or "nlpl" (an
    archive: ELMoForManyLangs' files, or NLPL's options.json + model.hdf5), or "tf-checkpoint" (a bilm-tf
    TensorFlow checkpoint with its softmax: `checkpoint_files` options, index, data and vocab). NLPL entries carry
    `language`, `preprocessing` ("tokens" or "lemmas") and the source of each fact in `sources`."""

    name: str
    aliases: tuple[str, ...]
    format: str
    description: str
    vector_size: int | None
    parameters_millions: float | None
    corpus: str
    licence: str
    source: str
    options: RemoteFile | None = None
    weights: RemoteFile | None = None
    archive: RemoteFile | None = None
    checkpoint_files: tuple[tuple[str, RemoteFile], ...] = ()  # format "tf-checkpoint": role -> file (elmo.tf.bilm_models)
    old_urls: tuple[str, ...] = ()
    language: str | None = None
    preprocessing: str | None = None
    sources: tuple[FactSource, ...] = ()

    @property
    def remote_files(self) -> tuple[RemoteFile, ...]:
        return tuple(f for f in (self.options, self.weights, self.archive) if f is not None) + tuple(
            f for _, f in self.checkpoint_files)

    @property
    def download_size(self) -> int | None:
        """Bytes to download, when every file's size is known."""
        sizes = [f.size for f in self.remote_files]
        return None if None in sizes else sum(sizes)


def _model(entry: dict) -> PublishedModel:
    entry = dict(entry)
    files = entry.pop("files", {})
    archive = entry.pop("archive", None)
    checkpoint = entry.pop("checkpoint_files", {})
    return PublishedModel(
        checkpoint_files=tuple((role, RemoteFile(**f)) for role, f in checkpoint.items()),
        aliases=tuple(entry.pop("aliases")), old_urls=tuple(entry.pop("old_urls", ())),
        options=RemoteFile(**files["options"]) if files else None,
        weights=RemoteFile(**files["weights"]) if files else None,
        archive=RemoteFile(**archive) if archive else None,
        sources=tuple(FactSource(**source) for source in entry.pop("sources", ())), **entry)


@functools.cache
def published_models() -> tuple[PublishedModel, ...]:
    """Every model of the catalog, in catalog order."""
    return tuple(_model(entry) for entry in json.loads(CATALOG_FILE.read_text(encoding="utf-8"))["models"])


@functools.cache
def _by_name() -> dict[str, PublishedModel]:
    table: dict[str, PublishedModel] = {}
    for model in published_models():
        for key in (model.name, *model.aliases):
            if key.lower() in table:
                raise ModelFileError(f"{CATALOG_FILE}: the name {key!r} is used twice")
            table[key.lower()] = model
    return table


def find_published(name: str) -> PublishedModel | None:
    """The model called `name` (or one of its aliases, case-insensitive), or None."""
    return _by_name().get(name.lower())


def canonical_url(url: str) -> str:
    """The spelling under which a URL is cached: AllenNLP's bucket always in its virtual-host form."""
    if url.startswith(S3_PATH_STYLE):
        return S3_VIRTUAL_HOST + url[len(S3_PATH_STYLE):]
    return url


def url_spellings(url: str) -> tuple[str, ...]:
    """Every spelling of the same object: the URL as given first, then the other S3 form if any."""
    canonical = canonical_url(url)
    if canonical.startswith(S3_VIRTUAL_HOST):
        other = S3_PATH_STYLE + canonical[len(S3_VIRTUAL_HOST):]
        return (url, other) if url == canonical else (url, canonical)
    return (url,)


def known_file(url: str) -> RemoteFile | None:
    """The catalog's record of the file at `url` (either S3 spelling), for its size and checksums."""
    return _by_url().get(canonical_url(url))


@functools.cache
def _by_url() -> dict[str, RemoteFile]:
    return {canonical_url(f.url): f for m in published_models() for f in m.remote_files}


def is_url(text: str) -> bool:
    """Whether `text` looks like a URL (has a scheme such as http:, ftp:, s3:) rather than a path."""
    try:
        parts = urlsplit(text)
    except ValueError:  # "Invalid IPv6 URL": a URL all the same, which check_url refuses in one line
        return "://" in text
    return bool(parts.scheme) and len(parts.scheme) > 1 and bool(parts.netloc)
