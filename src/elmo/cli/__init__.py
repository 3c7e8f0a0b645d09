"""The `elmo` command: a thin layer that parses arguments and calls the library.

Each command group lives in its own module with a `register(subparsers)` function.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ElmoError
from . import embed

COMMAND_MODULES = [embed]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elmo", description="ELMo: deep contextualized word representations.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except ElmoError as e:
        print(f"elmo {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"elmo {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
