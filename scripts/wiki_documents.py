"""Write a wiki_corpus split with a blank line after each document, the format `elmo train --batching
document`, `elmo perplexity --mode document` and `elmo embed --context document` read.

The corpus keeps its document boundaries in doc_index.tsv.gz (split, page_id, title, first_line,
n_lines, n_tokens; first_line 1-based in the split's file); the text files have none.

    python scripts/wiki_documents.py ../shared/data/wiki_corpus train ../runs/data/train-docs.txt.gz
    python scripts/wiki_documents.py ../shared/data/wiki_corpus test ../runs/data/test-docs.txt
"""

from __future__ import annotations

import argparse
import csv
import gzip
import sys
from pathlib import Path

from elmo.files.fileio import atomic_path

SPLIT_FILES = {"train": "train.txt.gz", "valid": "valid.txt", "test": "test.txt"}


def document_lengths(index: Path, split: str) -> list[int]:
    """Lines per document of `split`, in file order; the index must cover the file without gaps."""
    lengths, expected_first = [], 1
    with gzip.open(index, "rt", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["split"] != split:
                continue
            first, n = int(row["first_line"]), int(row["n_lines"])
            if first != expected_first:
                raise SystemExit(f"{index}: document {row['page_id']} of {split} starts at line {first}, expected {expected_first}")
            lengths.append(n)
            expected_first = first + n
    if not lengths:
        raise SystemExit(f"{index}: no documents of split {split!r}")
    return lengths


def _open(path: Path, mode: str, gz: bool):
    return gzip.open(path, mode, encoding="utf-8") if gz else open(path, mode, encoding="utf-8")


def write_documents(corpus: Path, split: str, out: Path) -> tuple[int, int]:
    """-> (documents, lines) written."""
    lengths = document_lengths(corpus / "doc_index.tsv.gz", split)
    lines = 0
    with atomic_path(out) as tmp, _open(corpus / SPLIT_FILES[split], "rt", split == "train") as src, \
            _open(Path(tmp), "wt", out.suffix == ".gz") as dst:
        for n in lengths:
            for _ in range(n):
                line = src.readline()
                if not line:
                    raise SystemExit(f"{corpus / SPLIT_FILES[split]}: ended at line {lines}, the index lists {sum(lengths)} lines")
                dst.write(line)
                lines += 1
            dst.write("\n")
        if src.readline():
            raise SystemExit(f"{corpus / SPLIT_FILES[split]}: has lines after the {sum(lengths)} the index lists")
    return len(lengths), lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("corpus", type=Path, help="the wiki_corpus folder (with doc_index.tsv.gz)")
    p.add_argument("split", choices=sorted(SPLIT_FILES))
    p.add_argument("out", type=Path, help="file to write (.gz: gzip)")
    args = p.parse_args(argv)
    documents, lines = write_documents(args.corpus, args.split, args.out)
    print(f"{args.out}: {documents:,} documents, {lines:,} sentences", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
