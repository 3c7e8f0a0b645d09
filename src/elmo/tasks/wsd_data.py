"""WSD data: Raganato et al. (2017) XML + gold keys, WordNet 3.0 sense index, and the official scoring rules."""

from __future__ import annotations

import functools
import gzip
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from elmo.errors import InputError
from elmo.files.fileio import check_file

from .readers import numbered_lines as _lines

# Coarse POS of the framework -> WordNet ss_types (3 adjective, 5 adjective satellite).
SS_TYPES = {"NOUN": ("1",), "VERB": ("2",), "ADJ": ("3", "5"), "ADV": ("4",)}


@dataclass
class WsdInstance:
    """A word (or multiword expression) to disambiguate: tokens [start, end) of its sentence."""

    id: str
    lemma: str
    pos: str
    start: int
    end: int


@dataclass
class WsdSentence:
    id: str
    tokens: list[str] = field(default_factory=list)
    instances: list[WsdInstance] = field(default_factory=list)


def read_raganato_xml(path: str | os.PathLike, limit: int | None = None) -> list[WsdSentence]:
    """Sentences with their tokens and instances; a multiword instance ("belong to") spans several tokens.

    `limit` stops after that many sentences (a slice of SemCor without parsing all 39 MB).

    Parsed with expat so that every error names the line: malformed XML, an instance without
    id/lemma/pos, or words outside a sentence.
    """
    path = check_file(path, "a SemCor XML file")
    sentences: list[WsdSentence] = []
    state: dict = {"sentence": None, "element": None, "attrs": None, "text": []}
    parser = expat.ParserCreate("UTF-8")

    def where() -> str:
        return f"{path}, line {parser.CurrentLineNumber}"

    def start(name, attrs):
        if name == "sentence":
            if "id" not in attrs:
                raise InputError(f"{where()}: <sentence> without an id attribute")
            state["sentence"] = WsdSentence(attrs["id"])
        elif name in ("wf", "instance"):
            if state["sentence"] is None:
                raise InputError(f"{where()}: <{name}> outside a <sentence>")
            if name == "instance":
                missing = [a for a in ("id", "lemma", "pos") if a not in attrs]
                if missing:
                    raise InputError(f"{where()}: <instance> without attribute(s) {', '.join(missing)}")
            state["element"], state["attrs"], state["text"] = name, attrs, []

    def end(name):
        sentence = state["sentence"]
        if name in ("wf", "instance"):
            words = "".join(state["text"]).split()
            if not words:
                raise InputError(f"{where()}: empty <{name}> (expected the word's text)")
            if name == "instance":
                a = state["attrs"]
                first = len(sentence.tokens)
                sentence.instances.append(WsdInstance(a["id"], a["lemma"], a["pos"], first, first + len(words)))
            sentence.tokens.extend(words)
            state["element"] = None
        elif name == "sentence":
            sentences.append(sentence)
            state["sentence"] = None

    def text(data):
        if state["element"] is not None:
            state["text"].append(data)

    parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, text
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        try:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                parser.Parse(chunk, False)
                if limit is not None and len(sentences) >= limit:
                    return sentences[:limit]
            parser.Parse(b"", True)
        except expat.ExpatError as e:
            raise InputError(f"{path}, line {e.lineno}, column {e.offset + 1}: malformed XML: "
                             f"{expat.ErrorString(e.code)}") from None
    if not sentences:
        raise InputError(f"{path}: no <sentence> elements found (expected a Raganato-format .data.xml)")
    return sentences


def read_gold_keys(path: str | os.PathLike, ids: set[str] | None = None) -> dict[str, set[str]]:
    """`instance_id key1 [key2 ...]` per line -> id -> set of keys (a repeated id gets the union).

    `ids` keeps only those instances (a slice of SemCor)."""
    gold = _read_gold_keys(os.path.abspath(path), os.path.getmtime(path) if os.path.exists(path) else 0)
    return {k: set(v) for k, v in gold.items() if ids is None or k in ids}


@functools.lru_cache(maxsize=4)
def _read_gold_keys(path: str, mtime: float) -> dict[str, frozenset[str]]:
    """Cached per process: the layers of a probe grid read the same 7 MB SemCor key file."""
    gold: dict[str, set[str]] = defaultdict(set)
    for number, line in _lines(path):
        if not line.strip():
            continue
        fields = line.split(" ")
        if len(fields) < 2 or not all(fields):
            raise InputError(f"{path}, line {number}: expected 'instance_id key [key ...]' separated by "
                             f"single spaces, found {line!r}")
        gold[fields[0]].update(fields[1:])
    if not gold:
        raise InputError(f"{path}: no keys found")
    return {k: frozenset(v) for k, v in gold.items()}


@functools.lru_cache(maxsize=2)
def wordnet_senses(index_sense: str) -> WordNetSenses:
    """One `WordNetSenses` per file and process (reading index.sense takes a second or two)."""
    return WordNetSenses(index_sense)


class WordNetSenses:
    """WordNet 3.0 `index.sense`: the senses of a (lemma, coarse POS) in sense-number order."""

    def __init__(self, index_sense: str | os.PathLike):
        self.path = os.fspath(index_sense)
        senses: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
        pos_of = {t: pos for pos, types in SS_TYPES.items() for t in types}
        for number, line in _lines(self.path):
            fields = line.split()
            try:
                key, _, sense_number, _ = fields
                lemma, rest = key.split("%")
                senses[(lemma, pos_of[rest[0]])].append((int(sense_number), key))
            except (ValueError, KeyError, IndexError):
                raise InputError(f"{self.path}, line {number}: expected 'lemma%ss_type:... offset sense_number "
                                 f"tag_cnt' with ss_type 1-5, found {line!r}") from None
        if not senses:
            raise InputError(f"{self.path}: no senses found")
        self._senses = dict(senses)  # (sense_number, key) lists, sorted on first use

    def senses(self, lemma: str, pos: str) -> list[str]:
        return [key for _, key in sorted(self._senses.get((lemma.lower(), pos), ()))]

    def first_sense(self, lemma: str, pos: str) -> str | None:
        """WordNet's sense number 1 (the most frequent sense baseline), or None for an unknown lemma."""
        found = self.senses(lemma, pos)
        return found[0] if found else None


def read_glosses(wordnet_dir: str | os.PathLike, sense_keys: set[str]) -> dict[str, str]:
    """sense key -> the first part of its WordNet 3.0 gloss, from index.sense.gz and data.<pos>.gz
    (keys WordNet lacks are left out; no files, no glosses)."""
    root = Path(wordnet_dir)
    index = root / "index.sense.gz"
    if not sense_keys or not index.is_file():
        return {}
    offsets: dict[tuple[str, str], str] = {}  # (data file suffix, offset) -> key
    pos_file = {"1": "noun", "2": "verb", "3": "adj", "4": "adv", "5": "adj"}
    with gzip.open(index, "rt", encoding="utf-8") as f:
        for line in f:
            key, offset, *_ = line.split()
            if key in sense_keys:
                offsets[(pos_file[key.split("%")[1][0]], offset)] = key
    glosses = {}
    for suffix in sorted({s for s, _ in offsets}):
        path = root / f"data.{suffix}.gz"
        if not path.is_file():
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                key = offsets.get((suffix, line[:8]))
                if key and " | " in line:
                    glosses[key] = line.split(" | ", 1)[1].split(";")[0].strip()
    return glosses


def first_sense_answers(sentences: list[WsdSentence], wordnet: WordNetSenses) -> dict[str, str]:
    """The WordNet first-sense baseline: sense number 1 of each instance's lemma and POS."""
    answers = {}
    for s in sentences:
        for inst in s.instances:
            key = wordnet.first_sense(inst.lemma, inst.pos)
            if key is not None:
                answers[inst.id] = key
    return answers


def score_wsd(gold: dict[str, set[str]], system: dict[str, set[str] | str]) -> dict[str, float]:
    """The framework scorer's rules: credit |S∩G|/|S| per answered gold instance; P over answered,
    R over all gold instances; F1 = 2PR/(P+R). Percentages."""
    correct = wrong = 0.0
    for instance_id, keys in system.items():
        if instance_id not in gold:
            continue
        keys = {keys} if isinstance(keys, str) else set(keys)
        if not keys:
            continue
        hit = len(keys & gold[instance_id])
        correct += hit / len(keys)
        wrong += (len(keys) - hit) / len(keys)
    p = correct / (correct + wrong) if correct + wrong else 0.0
    r = correct / len(gold) if gold else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": 100 * p, "recall": 100 * r, "f1": 100 * f1, "n_gold": len(gold),
            "n_answered": sum(1 for i in system if i in gold)}
