"""The markdown table of issue #26's PTB comparisons (benchmarks/ptb_ablations.sh), from its logs.

Reads DIR/<name>/benchmark.jsonl or DIR/<name>.jsonl for the biLM runs and DIR/<name>.log for the
word LSTM runs; `--collect OUT` also copies those logs to OUT (benchmarks/results/ptb-ablations)
under the second layout, so the committed table re-renders from a clean checkout.

    python benchmarks/ptb_ablations_table.py ../runs/ptb-abl --collect benchmarks/results/ptb-ablations
    python benchmarks/ptb_ablations_table.py benchmarks/results/ptb-ablations
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

RUNS = {  # name: what differs, the flags of the benchmark
    "bilm-stream-mean": ("biLM, shuffled sentences packed into rows, mean of the direction losses (the 25-epoch run's recipe)",
                         "ptb_char_small.py --batching stream --objective mean"),
    "bilm-ordered-mean": ("biLM, the text in order as 20 streams (Kim's), mean", "ptb_char_small.py --batching ordered --objective mean"),
    "bilm-ordered-sum": ("biLM, in order, sum of the direction losses", "ptb_char_small.py --batching ordered --objective sum"),
    "bilm-ordered-forward": ("forward LM alone, in order (same model; the backward half unused)",
                             "ptb_char_small.py --batching ordered --objective forward"),
    "word": ("word nn.LSTM of the same size, in order (Kim's recipe)", "ptb_word_reference.py"),
    "word-shuffled": ("word nn.LSTM, sentences shuffled each epoch", "ptb_word_reference.py --shuffle-sentences"),
}
WORD_VALID = re.compile(r"^epoch (\d+): valid ppl ([\d.]+)$", re.M)


def bilm_log(folder: Path, name: str) -> Path | None:
    return next((p for p in (folder / name / "benchmark.jsonl", folder / f"{name}.jsonl") if p.exists()), None)


def row(folder: Path, name: str) -> list[str] | None:
    """One table row: validation perplexity per epoch, forward / backward, and from zero state at the end."""
    what, flags = RUNS[name]
    if name.startswith("bilm-"):
        log = bilm_log(folder, name)
        if log is None:
            return None
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        if any(r.get("objective", "mean") == "forward" for r in records):
            per_epoch = [f"{r['valid']['forward']:.1f}" for r in records]
        else:
            per_epoch = [f"{r['valid']['forward']:.1f} / {r['valid']['backward']:.1f}" for r in records]
        last = records[-1]
        zero = last.get("valid_zero_state")
        carried = (f"{last['valid']['forward']:.1f} vs {zero['forward']:.1f} ({zero['forward'] / last['valid']['forward'] - 1:+.1%})"
                   if zero else "not scored")
    else:
        log = folder / f"{name}.log"
        if not log.exists():
            return None
        per_epoch = [ppl for _, ppl in WORD_VALID.findall(log.read_text())]
        carried = "not scored"
    if not per_epoch:
        return None
    return [what, f"`{flags}`", ", ".join(per_epoch), carried]


def table(folder: Path) -> str:
    lines = ["| setup | command (benchmarks/) | validation ppl per epoch, forward / backward | after the last epoch: state carried vs every sentence from zero state (forward) |",
             "|---|---|---|---|"]
    for name in RUNS:
        cells = row(folder, name)
        if cells:
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def collect(runs: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        log = bilm_log(runs, name) if name.startswith("bilm-") else runs / f"{name}.log"
        if log is not None and log.exists():
            shutil.copyfile(log, out / (f"{name}.jsonl" if name.startswith("bilm-") else f"{name}.log"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="the RUNS folder of ptb_ablations.sh, or a folder made by --collect")
    p.add_argument("--collect", type=Path, metavar="OUT", help="also copy the logs here (benchmarks/results/ptb-ablations)")
    args = p.parse_args()
    if not args.folder.is_dir():
        raise SystemExit(f"ptb_ablations_table: {args.folder} is not a folder of ptb_ablations.sh runs")
    if args.collect:
        collect(args.folder, args.collect)
    print(table(args.folder))


if __name__ == "__main__":
    main()
