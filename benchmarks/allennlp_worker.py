"""Times AllenNLP 2.10.1's `_ElmoBiLm` on a sentence file; runs inside the peer virtualenv only.

Started by benchmarks/speed.py with the peer venv's python (built by
../shared/tools/allennlp-peer-venv.sh). It imports nothing from this project. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids


def _peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM, which starts again at exec; ru_maxrss keeps a parent's peak)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--options", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--sentences", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--order", choices=["file", "sorted"], required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--dump", help="save all layers of the first --dump-sentences sentences (file order) here")
    p.add_argument("--dump-sentences", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    sentences = [line.split() for line in Path(args.sentences).read_text(encoding="utf-8").splitlines()]
    order = list(range(len(sentences)))
    if args.order == "sorted":
        order.sort(key=lambda i: len(sentences[i]), reverse=True)
    batches = [order[i : i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    bilm = _ElmoBiLm(args.options, args.weights, requires_grad=False).eval()

    def run_all(subset=batches) -> None:
        for rows in subset:
            bilm._elmo_lstm.reset_states()  # stateless, like ours: a fair comparison
            bilm(batch_to_ids([sentences[i] for i in rows]))

    times = []
    with torch.no_grad():
        run_all(batches[:2])  # warm-up: two batches
        for _ in range(args.passes):
            start = time.perf_counter()
            run_all()
            times.append(time.perf_counter() - start)
        if args.dump:
            bilm._elmo_lstm.reset_states()
            first = sentences[: args.dump_sentences]
            out = bilm(batch_to_ids(first))
            layers = torch.stack(out["activations"], 1)[:, :, 1:-1].numpy()  # drop <S>; </S> masked below
            arrays = {str(i): layers[i, :, : len(s)] for i, s in enumerate(first)}
            np.savez(args.dump, **arrays)
    tokens = sum(len(s) for s in sentences)
    print(json.dumps({
        "impl": "allennlp-2.10.1", "order": args.order, "threads": args.threads, "tokens": tokens,
        "seconds": statistics.median(times), "tokens_per_s": tokens / statistics.median(times),
        "passes": times, "peak_rss_mb": _peak_rss_mb(),
    }))


if __name__ == "__main__":
    main()
