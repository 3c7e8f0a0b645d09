"""The catalog (src/elmo/hub/catalog.json) against the research notes' tables, so that a typo cannot slip in."""

from __future__ import annotations

import re
from itertools import product

import pytest
from conftest import SHARED, need

from elmo.hub.catalog import canonical_url, find_published, known_file, published_models, url_spellings

DOC = SHARED / "docs" / "published-models.md"
PREFIX = "https://allennlp.s3.amazonaws.com/models/elmo"
# In the notes but deliberately not in the catalog, as neither is an options/weights pair or a model directory:
# Transformer ELMo (an AllenNLP model archive, section 2) and the TF-Hub modules (TF graphs, section 5).


@pytest.fixture(scope="module")
def doc() -> str:
    return need(DOC).read_text(encoding="utf-8")


def section(doc: str, heading: str) -> str:
    """From `heading` to the next heading of its level or above."""
    start = doc.index(heading)
    level = len(heading.split(" ")[0])
    end = re.search(r"\n#{1," + str(level) + "} ", doc[start + 1:])
    return doc[start:start + 1 + end.start() if end else None]


def rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row (header and rule rows left out)."""
    out = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"[|\-: ]+", line):
            out.append([c.strip() for c in line.strip("|").split("|")])
    return out[1:] if out else out


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_proposed_name_table_matches_the_catalog_exactly(doc):
    table = rows(section(doc, "## 3. Proposed"))
    assert len(table) == 12
    for cells in table:
        name, *aliases = ticked(cells[0])
        model = find_published(name)
        assert model is not None and model.name == name, name
        for alias in aliases:
            if alias != "portuguese" or name == "pt":
                assert find_published(alias) is model, alias
        options = ticked(cells[1])[0].replace("...", PREFIX)
        assert model.options.url == options, name
        assert model.weights.url == expand(ticked(cells[2])[0], options), name


def test_allennlp_models_table_paths(doc):
    for cells in rows(section(doc, "### 1.2 Models")):
        name = ticked(cells[0])[0]
        model = find_published(name)
        assert model.options.url == f"{PREFIX}/{ticked(cells[1])[0]}"
        assert model.weights.url == f"{PREFIX}/{ticked(cells[2])[0]}"
        assert f"(ELMo vector {model.vector_size})" in cells[3] or f"({model.vector_size})" in cells[3]
        assert cells[5] == f"{model.parameters_millions} M"


def test_manylangs_table_matches_the_catalog(doc):
    table = rows(section(doc, "## 4. ELMoForManyLangs"))
    assert len(table) == 45
    for cells in table:
        code, url = cells[1], re.search(r"http://\S+", cells[3]).group(0)
        model = find_published(f"manylangs-{code}")
        assert model is not None and model.format == "manylangs", code
        assert model.archive.url == url
        if cells[2] != "—":
            assert url.endswith(f"/{cells[2]}.zip")


def expand(cell: str, options_url: str) -> str:
    """`...` is the allennlp.s3 prefix, or in a row with an absolute options URL, that URL's own prefix."""
    if not cell.startswith("...") or options_url.startswith(PREFIX):
        return cell.replace("...", PREFIX)
    rest = cell[3:]
    return options_url[:options_url.index("/" + rest.split("/")[1] + "/")] + rest


def doc_urls(doc: str) -> set[str]:
    """Every URL written out in the notes, with {a,b} lists and `.../hit/` shorthands expanded."""
    urls = set()
    for raw in re.findall(r"https?://[^\s`|)\"']+", doc):
        raw = raw.rstrip(".,;")
        lists = re.findall(r"\{([^}]*)\}", raw)
        template = re.sub(r"\{[^}]*\}", "{}", raw)
        for choice in product(*[part.split(",") for part in lists]):
            urls.add(template.format(*choice))
    for code in re.findall(r"\.\.\./hit/(\w+)\.model\.tar\.xz", doc):
        urls.add(f"http://vectors.nlpl.eu/repository/hit/{code}.model.tar.xz")
    return urls


def test_every_catalog_url_is_written_in_the_notes(doc):
    """Each URL (in one S3 spelling or the other) appears in the notes, or in a table checked above."""
    written = {canonical_url(u) for u in doc_urls(doc)}
    checked = {canonical_url(f"{PREFIX}/{p}") for p in re.findall(r"`(2x[^`]+\.(?:json|hdf5))`", doc)}
    checked |= {canonical_url(c.replace("...", PREFIX)) for c in re.findall(r"`(\.\.\./[^`]+)`", section(doc, "## 3. Proposed"))}
    for model in published_models():
        if model.format in ("nlpl", "tf-checkpoint", "tfhub") or model.name.startswith("seqvec"):  # sources in the
            # catalog itself (test_nlpl, test_tf_reference, test_tfhub_hub, test_seqvec_catalog)
            continue
        for url in [f.url for f in model.remote_files] + list(model.old_urls):
            assert canonical_url(url) in written | checked, f"{model.name}: {url} is not in {DOC}"


def test_known_sizes_and_checksums_are_the_published_ones(doc):
    original = find_published("original")
    assert original.weights.size == 374_434_792 and "374,434,792" in doc
    assert original.options.size == 336 and find_published("pubmed").weights.size == 374_434_792
    german = find_published("de")
    for md5 in (german.options.md5, german.weights.md5):
        assert md5 in section(doc, "## 6. Checksums")
    assert known_file(original.weights.url.replace(PREFIX, "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo")) \
        == original.weights


def test_names_flair_uses():
    for name in ["small", "medium", "original", "large", "5.5B", "pt", "portuguese", "pubmed"]:
        assert find_published(name) is not None, name
    assert find_published("large") is find_published("5.5b") is find_published("5.5B")
    assert find_published("default") is None  # `default` stays the bundled model


def test_spellings():
    path = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/a/b.hdf5"
    host = "https://allennlp.s3.amazonaws.com/models/elmo/a/b.hdf5"
    assert url_spellings(path) == (path, host) and url_spellings(host) == (host, path)
    assert url_spellings("http://x/y") == ("http://x/y",)


def test_every_model_has_its_facts():
    models = published_models()
    assert len({m.name for m in models}) == len(models) == 74
    for m in models:
        assert m.format in ("allennlp", "allennlp-archive", "manylangs", "nlpl", "tf-checkpoint", "tfhub") and m.corpus \
            and m.licence and m.source and m.description
        assert (m.archive is None) == (m.format in ("allennlp", "tf-checkpoint"))
