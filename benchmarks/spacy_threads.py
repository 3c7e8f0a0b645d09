"""The spaCy layer's (`elmo.ELMoEmbed.v1`'s mix) torch threads, measured: words per second of its biLM passes at 1
and 2 threads, on a quiet machine and beside one CPU-bound process (`python -c "while True: pass"`, not pinned: what
shared cores look like). This chooses the `threads` default of the spaCy layer, the spaCy component and flair's
embeddings (docs/integrations.md "Threads").

Each measurement is a fresh process (OpenMP's pool is made once per process) that builds the layer with
`threads=T` on the bundled model, warms it on one batch, then runs training steps (forward and backprop, cache off:
every batch goes through the biLM, as in a first epoch) over the first `--lines` lines of the wiki corpus in
batches of 32 docs. Conditions alternate within each round, so drift in the machine hits all of them alike.

    python benchmarks/spacy_threads.py --lines 200 --rounds 2 --out benchmarks/results/spacy_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUSY = [sys.executable, "-c", "while True: pass"]
BATCH_DOCS = 32


def worker(threads: int, lines: int) -> dict:
    """Words per second of the layer's training steps at `threads` (this process only)."""
    import spacy
    from benchlib import SENTENCES
    from spacy.tokens import Doc

    from elmo.integrations.spacy_layers import elmo_mix

    vocab = spacy.blank("en").vocab
    docs = [Doc(vocab, words=line.split()) for line in SENTENCES.read_text(encoding="utf-8").splitlines()[:lines]]
    docs = [doc for doc in docs if len(doc)]
    mix = elmo_mix("default", dropout=0.0, cache_mb=0, threads=threads)
    mix.initialize()
    batches = [docs[k : k + BATCH_DOCS] for k in range(0, len(docs), BATCH_DOCS)]
    _step(mix, batches[0])  # warm-up: the biLM loaded, torch's pool started
    import torch

    cpu_before, start = _cpu_seconds(), time.perf_counter()
    for batch in batches:
        _step(mix, batch)
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_before
    words = sum(len(doc) for doc in docs)
    return {"threads": threads, "torch_threads": torch.get_num_threads(), "words": words, "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "words_per_s": round(words / wall, 1)}


def _step(mix, batch) -> None:
    outputs, backprop = mix(batch, is_train=True)
    backprop([o * 0 + 1 for o in outputs])


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(threads: int, busy: bool, lines: int) -> dict:
    """One worker process, beside a CPU-bound process when `busy`."""
    neighbour = subprocess.Popen(BUSY) if busy else None
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "worker", "--threads", str(threads),
                               "--lines", str(lines)], capture_output=True, text=True, cwd=HERE.parent,
                              env=_worker_env())
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    if done.returncode != 0:
        sys.exit(f"worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"beside": "one CPU-bound process" if busy else "nothing"}


def _worker_env() -> dict:
    """The environment without thread variables (the layer's `threads` setting alone decides), benchlib importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return env | {"PYTHONPATH": str(HERE)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    work = sub.add_parser("worker")
    work.add_argument("--threads", type=int, required=True)
    work.add_argument("--lines", type=int, required=True)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "spacy_threads.json")
    args = parser.parse_args(argv)
    if args.command == "worker":
        print(json.dumps(worker(args.threads, args.lines)))
        return
    from benchlib import machine, save_results

    conditions = [(1, False), (2, False), (1, True), (2, True)]
    results = {"command": "python benchmarks/" + " ".join([Path(__file__).name, *(argv or sys.argv[1:])]),
               "machine": machine(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "load_before": os.getloadavg(), "rows": []}
    for round_ in range(args.rounds):
        order = conditions if round_ % 2 == 0 else conditions[::-1]
        for threads, busy in order:
            row = measure(threads, busy, args.lines) | {"round": round_}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            save_results(results, args.out)
    results["load_after"] = os.getloadavg()
    save_results(results, args.out)


if __name__ == "__main__":
    main()
