#!/usr/bin/env python
"""Two arms of task runs, seed by seed: is their difference beyond seed noise?

Each arm is a name and its `elmo task train --out` metrics files, with the same seeds in both.
Prints a markdown table (dev and test score per seed, mean and sample standard deviation per arm)
and one verdict per split by the rule it prints (`elmo.tasks.paper.NOISE_RULE`).

    python scripts/compare_runs.py --a float32 RUNS_A/ner-elmo-1-s{1,2,3}.json \\
        --b int8 RUNS_B/ner-elmo-int8-1-s{1,2,3}.json
"""

from __future__ import annotations

import argparse
import sys

from elmo.tasks.paper import compare_arms


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", nargs="+", required=True, metavar="NAME FILE", help="the first arm's name, then its files")
    p.add_argument("--b", nargs="+", required=True, metavar="NAME FILE", help="the second arm's name, then its files")
    args = p.parse_args(argv)
    if len(args.a) < 2 or len(args.b) < 2:
        p.error("each arm needs a name and at least one file")
    try:
        lines = compare_arms(args.a[1:], args.b[1:], (args.a[0], args.b[0]))
    except ValueError as e:
        raise SystemExit(str(e)) from None
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
