"""Published ELMo models by name and by URL: the catalog, a download cache, AllenNLP's cache, archives.

Submodules: catalog (the models as data), cache (where files live), download (one HTTP download),
fetch (cache -> AllenNLP's cache -> network), allennlp_cache, archives, published (model references),
reference_checks (what a URL or hf:// name must look like), huggingface (hf://), nlpl_zip (NLPL's zips).
Only the catalog is imported here, so `import elmo` does not import the HTTP stack.

May import: elmo_char_ids, elmo.errors, elmo.files, elmo.formats, elmo.model.
"""

from __future__ import annotations

import os

from .catalog import PublishedModel, find_published, is_url, published_models

__all__ = ["PublishedModel", "find_published", "is_url", "local_path", "published_models"]


def local_path(path_or_url: str | os.PathLike) -> str | os.PathLike:
    """A path unchanged; a URL fetched into the cache (see hub.fetch) and its local path instead.

    Every place that takes a model file calls this, so a URL works wherever a path does."""
    if isinstance(path_or_url, str) and is_url(path_or_url):
        from .fetch import fetch

        return fetch(path_or_url)
    return path_or_url
