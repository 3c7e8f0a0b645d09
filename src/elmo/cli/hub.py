"""`elmo models` (the published models, and which are cached) and `elmo download NAME|URL ...`."""

from __future__ import annotations

import argparse
import json

from elmo.hub.catalog import published_models
from elmo.models import bundled_models

COLUMNS = ("name", "dim", "corpus", "download", "licence", "cached")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the published ELMo models (by name for --model) and whether they are cached",
                       description="The published models that --model NAME, Elmo.from_pretrained(NAME) and "
                       "`elmo download NAME` accept, with the bundled ones. `cached`: elmo (this package's cache), "
                       "allennlp (AllenNLP's cache), or empty (downloaded on first use). Uses no network.")
    p.add_argument("--json", action="store_true", help="a JSON list of objects (name, aliases, urls, ...) instead")
    p.set_defaults(func=run_models)
    p = sub.add_parser("download", help="fetch published models (by name or URL) into the cache",
                       description="Download models into the cache ($ELMO_CACHE, default the user cache folder) "
                       "and print where they are; a file already cached (here or by AllenNLP) is not fetched again. "
                       "Copy the cache folder to a machine without network and set ELMO_CACHE there.")
    p.add_argument("models", nargs="+", metavar="NAME_OR_URL", help="a name from `elmo models`, or a URL")
    p.add_argument("--force", action="store_true", help="drop this package's cache entries of these models first and "
                   "fetch them again (ELMO_DOWNLOAD_TIMEOUT, ELMO_DOWNLOAD_MIN_RATE, ELMO_LOCK_WAIT bound the waits)")
    p.set_defaults(func=run_download)


def model_rows() -> list[dict]:
    from elmo.hub.published import cache_status

    rows = [{"name": name, "aliases": [], "format": "allennlp", "vector_size": _bundled_vector_size(name),
             "corpus": "bundled with this package", "licence": "Apache-2.0", "download_size": 0, "cached": "bundled",
             "urls": []} for name in bundled_models()]
    for m in published_models():
        rows.append({"name": m.name, "aliases": list(m.aliases), "format": m.format, "vector_size": m.vector_size,
                     "parameters_millions": m.parameters_millions, "corpus": m.corpus, "licence": m.licence,
                     "download_size": m.download_size, "cached": cache_status(m),
                     "urls": [f.url for f in m.remote_files], "description": m.description})
        if m.format == "nlpl":
            rows[-1].update(_nlpl_facts(m, rows[-1]["cached"]))
    return rows


def _nlpl_facts(m, cached: str) -> dict:
    """An NLPL model's language and tokens/lemmas, and, once it is cached, its meta.json's facts."""
    from elmo.hub.nlpl_zip import cached_meta_facts

    return {"language": m.language, "preprocessing": m.preprocessing,
            "meta": cached_meta_facts(m.archive.url) if cached else {}}


def _bundled_vector_size(name: str) -> int:
    from elmo.model.options import read_options
    from elmo.models import BUNDLED_DIR

    return 2 * read_options(BUNDLED_DIR / name / "options.json").projection_dim


def _cell(row: dict, column: str) -> str:
    if column == "dim":
        return str(row["vector_size"] or "?")
    if column == "download":
        size = row["download_size"]
        return "?" if size is None else "-" if size == 0 else f"{size / 1e6:.0f} MB"
    text = str(row[column] or "")
    return text if len(text) <= 44 else text[:43] + "…"


def run_models(args: argparse.Namespace) -> int:
    rows = model_rows()
    if args.json:
        print(json.dumps(rows, indent=1, ensure_ascii=False))
        return 0
    cells = [[_cell(r, c) for c in COLUMNS] for r in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(COLUMNS)]
    for line in [list(COLUMNS), *cells]:
        print("  ".join(text.ljust(w) for text, w in zip(line, widths)).rstrip())
    for row in rows:
        if row.get("meta"):
            print(f"{row['name']} meta.json: " + ", ".join(f"{k}={v}" for k, v in row["meta"].items()))
    return 0


def run_download(args: argparse.Namespace) -> int:
    from elmo.files.layout import cache_root
    from elmo.models import download_reference

    for reference in args.models:
        if args.force:
            from elmo.hub.download import forget_reference

            forget_reference(reference)
        for path in download_reference(reference):
            print(f"{reference}: {path}")
    print(f"cache: {cache_root()}")
    return 0
