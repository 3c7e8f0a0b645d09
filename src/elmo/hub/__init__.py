"""Published ELMo models by name and by URL: the catalog, a download cache, AllenNLP's cache, archives.

Submodules: catalog (the models as data), cache (where files live), download (one HTTP download),
fetch (cache -> AllenNLP's cache -> network), allennlp_cache, archives, published (model references).
Only the catalog is imported here, so `import elmo` does not import the HTTP stack.
"""

from .catalog import PublishedModel, find_published, is_url, published_models

__all__ = ["PublishedModel", "find_published", "is_url", "published_models"]
