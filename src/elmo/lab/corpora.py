"""The real sentences the lab compares against, from the project's shared data.

The data are never copied into the package: they are read from `--data DIR`, $ELMO_DATA,
$ELMO_SHARED/data or `../shared/data` beside the current folder. The CoNLL-U and SemCor files are
parsed by the task readers (tasks/readers.py, tasks/wsd_data.py); this module only picks a few
hundred sentences from them, so a reference set is cheap to build and the same every time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from elmo.tasks.readers import read_conllu
from elmo.tasks.wsd_data import WsdSentence, read_glosses, read_gold_keys, read_raganato_xml

# Ambiguous SemCor words and two of their WordNet 3.0 senses each (the most frequent two in SemCor,
# except where a clearer pair was close behind). Keys are what SemCor's gold file uses.
SENSE_WORDS: dict[tuple[str, str], tuple[str, str]] = {
    ("bank", "NOUN"): ("bank%1:14:00::", "bank%1:17:01::"),
    ("plant", "NOUN"): ("plant%1:06:01::", "plant%1:03:00::"),
    ("interest", "NOUN"): ("interest%1:09:00::", "interest%1:07:01::"),
    ("state", "NOUN"): ("state%1:15:01::", "state%1:03:00::"),
    ("power", "NOUN"): ("power%1:07:00::", "power%1:19:00::"),
    ("table", "NOUN"): ("table%1:14:00::", "table%1:06:01::"),
    ("paper", "NOUN"): ("paper%1:27:00::", "paper%1:10:01::"),
    ("play", "VERB"): ("play%2:33:00::", "play%2:41:12::"),
}

WIKI = Path("wiki_corpus/valid.txt")
EWT = Path("ud_english_ewt/en_ewt-ud-dev.conllu.gz")
SEMCOR = Path("wsd_raganato/Training_Corpora/SemCor")
WORDNET = Path("wordnet30/dict")


def find_data_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The shared data folder: --data, $ELMO_DATA, $ELMO_SHARED/data, or ../shared/data beside the
    current folder (a checkout). Never guessed from where the package lives: installed, that is
    site-packages."""
    candidates = [explicit, os.environ.get("ELMO_DATA")]
    if os.environ.get("ELMO_SHARED"):
        candidates.append(Path(os.environ["ELMO_SHARED"]) / "data")
    candidates.append(Path.cwd().parent / "shared" / "data")
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return None


@dataclass
class Sentence:
    """Tokens plus optional per-token labels ('' where there is none)."""

    tokens: list[str]
    source: str
    upos: list[str] = field(default_factory=list)
    senses: list[str] = field(default_factory=list)


def wiki_sentences(data: Path, count: int, min_len: int = 5, max_len: int = 40) -> list[Sentence]:
    """The first `count` Wikipedia validation sentences of a readable length."""
    path = data / WIKI
    out: list[Sentence] = []
    if count <= 0 or not path.is_file():
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            tokens = line.split()
            if min_len <= len(tokens) <= max_len:
                out.append(Sentence(tokens, "wiki"))
                if len(out) == count:
                    break
    return out


def ewt_sentences(data: Path, max_tokens: int, max_len: int = 40) -> list[Sentence]:
    """UD English-EWT dev sentences with their UPOS tags, about `max_tokens` tokens in all (the task
    reader: syntactic words only)."""
    path = data / EWT
    out: list[Sentence] = []
    if max_tokens <= 0 or not path.is_file():
        return out
    total = 0
    for example in read_conllu(path, "upos"):
        if len(example.tokens) <= max_len:
            out.append(Sentence(example.tokens, "ewt", upos=example.tags))
            total += len(example.tokens)
            if total >= max_tokens:
                break
    return out


def semcor_sentences(data: Path, per_sense: int, words=SENSE_WORDS, max_len: int = 40) -> list[Sentence]:
    """SemCor sentences holding the chosen ambiguous words, at most `per_sense` per sense, in file
    order; `senses[i]` is the sense key of token i when it is one of them (the WSD probe's readers).

    SemCor is read in growing prefixes (the reader stops after `limit` sentences), so a small
    reference set does not parse all 39 MB."""
    root = data / SEMCOR
    xml, keys = root / "semcor.data.xml.gz", root / "semcor.gold.key.txt.gz"
    if per_sense <= 0 or not xml.is_file() or not keys.is_file():
        return []
    allowed = {key for pair in words.values() for key in pair}
    gold = {i: min(k & allowed) for i, k in read_gold_keys(keys).items() if k & allowed}
    limit = 2000
    while True:
        sentences = read_raganato_xml(xml, limit=limit)
        out = _sense_sentences(sentences, gold, words, per_sense, max_len)
        if len(sentences) < limit or min(_sense_counts(out, allowed).values()) >= per_sense:
            return out
        limit *= 4


def _sense_sentences(sentences: list[WsdSentence], gold: dict[str, str], words, per_sense: int,
                     max_len: int) -> list[Sentence]:
    """Sentences with at least one wanted single-word instance, until every sense has `per_sense`."""
    allowed = {key for pair in words.values() for key in pair}
    taken = dict.fromkeys(allowed, 0)
    out: list[Sentence] = []
    for sentence in sentences:
        senses = [""] * len(sentence.tokens)
        for inst in sentence.instances:
            key = gold.get(inst.id, "") if inst.end - inst.start == 1 else ""
            if key and (inst.lemma, inst.pos) in words and taken[key] + senses.count(key) < per_sense:
                senses[inst.start] = key
        if any(senses) and len(sentence.tokens) <= max_len:
            for key in filter(None, senses):
                taken[key] += 1
            out.append(Sentence(sentence.tokens, "semcor", senses=senses))
            if min(taken.values()) >= per_sense:
                break
    return out


def _sense_counts(out: list[Sentence], allowed: set[str]) -> dict[str, int]:
    counts = dict.fromkeys(allowed, 0)
    for sentence in out:
        for key in filter(None, sentence.senses):
            counts[key] += 1
    return counts


def wordnet_glosses(data: Path, sense_keys: set[str]) -> dict[str, str]:
    """sense key -> the first part of its WordNet 3.0 gloss (tasks/wsd_data.py reads WordNet)."""
    return read_glosses(data / WORDNET, sense_keys)
