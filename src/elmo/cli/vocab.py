"""`elmo vocab`: a vocabulary file from a tokenized corpus (tokens by descending count)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vocab", help="build a vocabulary file from a tokenized corpus",
                       description="Count tokens and write <S>, </S>, <UNK>, then tokens by descending count "
                       "(ties in text order), one per line.")
    p.add_argument("corpus", nargs="+", help="files or globs of tokenized text, one sentence per line (.gz ok)")
    p.add_argument("-o", "--output", required=True, help="vocabulary file to write")
    p.add_argument("--min-count", type=int, default=1, help="keep tokens seen at least this often (default 1)")
    p.add_argument("--max-size", type=int, default=None, help="keep at most this many lines, specials included")
    p.set_defaults(func=run_vocab)


def run_vocab(args: argparse.Namespace) -> int:
    from elmo.files.output_paths import check_not_input
    from elmo.formats.lm_vocab import write_vocab
    from elmo.training.vocab import build_vocab, count_tokens

    check_not_input(args.output, {"CORPUS": args.corpus}, flag="--output")
    counts = count_tokens(args.corpus, progress=sys.stderr.isatty())
    tokens = build_vocab(counts, args.min_count, args.max_size)
    write_vocab(tokens, args.output)
    print(f"{args.output}: {len(tokens):,} tokens ({len(counts):,} types, {sum(counts.values()):,} tokens in the corpus)",
          file=sys.stderr)
    return 0
