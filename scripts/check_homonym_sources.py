"""Check that the hand-written homonym sets share no sentence with SemCor or the training corpus.

    python scripts/check_homonym_sources.py [--set tests/data/homonyms.json ...]

The issue asks for sentences written fresh (none from SemCor), and a sentence the bundled model was
trained on would test memory rather than context. Checks, for every sentence of every set:
- SemCor: no exact match (tokens joined by spaces, also case-folded) and no shared 8-token window;
- wiki_corpus train.txt.gz, valid.txt, test.txt: no exact line match.
Prints what it finds and exits 1 on any hit.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SEMCOR_XML = DATA / "wsd_raganato" / "Training_Corpora" / "SemCor" / "semcor.data.xml.gz"
WIKI = DATA / "wiki_corpus"
SETS = [REPO / "tests" / "data" / "homonyms.json", REPO / "tests" / "data" / "homonyms_heldout.json"]
WINDOW = 8


def windows(tokens: list[str], n: int = WINDOW) -> set[tuple[str, ...]]:
    """Every n-token window, case-folded (a case difference should not hide a copied passage)."""
    low = [t.lower() for t in tokens]
    return {tuple(low[i : i + n]) for i in range(len(low) - n + 1)}


def our_sentences(paths: list[Path]) -> list[str]:
    sys.path.insert(0, str(REPO / "src"))
    from elmo.tasks.contextuality import read_sense_set

    return [" ".join(o.tokens) for path in paths for occ in read_sense_set(path).values() for o in occ]


def semcor_hits(ours: list[str]) -> list[str]:
    from elmo.tasks.wsd_data import read_raganato_xml

    exact = {s.lower() for s in ours}
    our_windows = {w: s for s in ours for w in windows(s.split())}
    hits = []
    sentences = read_raganato_xml(SEMCOR_XML)
    for sentence in sentences:
        if " ".join(sentence.tokens).lower() in exact:
            hits.append(f"SemCor {sentence.id}: exact match {' '.join(sentence.tokens)!r}")
        for w in windows(sentence.tokens) & our_windows.keys():
            hits.append(f"SemCor {sentence.id}: shares {' '.join(w)!r} with {our_windows[w]!r}")
    print(f"SemCor: {len(sentences)} sentences checked, {len(hits)} hits")
    return hits


def wiki_hits(ours: list[str]) -> list[str]:
    exact = set(ours)
    hits = []
    for name in ("train.txt.gz", "valid.txt", "test.txt"):
        path = WIKI / name
        opener = gzip.open if name.endswith(".gz") else open
        n = 0
        with opener(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip() in exact:
                    hits.append(f"{name}:{n}: {line.strip()!r}")
        print(f"{name}: {n} lines checked")
    return hits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", dest="sets", type=Path, action="append", help="homonym file (default: both sets)")
    args = p.parse_args()
    ours = our_sentences(args.sets or SETS)
    print(f"{len(ours)} sentences ({len(set(ours))} distinct)")
    hits = semcor_hits(ours) + wiki_hits(ours)
    for hit in hits:
        print(hit)
    print("OK: no sentence found in SemCor or wiki_corpus" if not hits else f"{len(hits)} hits")
    sys.exit(1 if hits else 0)


if __name__ == "__main__":
    main()
