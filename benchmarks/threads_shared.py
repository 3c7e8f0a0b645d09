"""Why 2 torch threads lose several-fold when the cores are shared, measured: the `Embedder` on the bundled model,
1 and 2 threads, alone and beside a CPU-bound process, under OpenMP's default and passive waiting policies.

Each condition runs in a fresh process (OpenMP reads OMP_WAIT_POLICY / GOMP_SPINCOUNT when torch loads). Reported
per condition: wall seconds of the embedding (model loaded and warmed before), the process's CPU seconds over that
time (CPU beyond wall x 1 is a second thread's work or its spinning), and its involuntary context switches.

    python benchmarks/threads_shared.py --lines 400 --out benchmarks/results/threads_shared.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki_corpus" / "valid.txt"
# (label, threads, extra environment)
POLICIES = [
    ("1 thread", 1, {}),
    ("2 threads, OpenMP default", 2, {}),
    ("2 threads, OMP_WAIT_POLICY=passive", 2, {"OMP_WAIT_POLICY": "passive"}),
    ("2 threads, GOMP_SPINCOUNT=10000", 2, {"GOMP_SPINCOUNT": "10000"}),
    ("default_threads() (elmo.model.threads)", 0, {}),
]
SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"


def worker(lines: int, threads: int, path: Path) -> dict:
    """Embed the first `lines` lines with `threads` torch threads (0: elmo.model.threads' default); times the embedding.
    An explicit count loads torch first, so OpenMP keeps the policy the row's environment names (none: GNU
    OpenMP's default spinning); the default row imports elmo first, as `elmo embed` and `import elmo` do."""
    if threads:
        import torch
    import torch

    from elmo import Embedder
    from elmo.model.threads import set_threads

    count = set_threads(threads or None)
    sentences = [line.split() for _, line in zip(range(lines), path.open(encoding="utf-8"))]
    embedder = Embedder.from_model("default")
    list(embedder.embed_sentences(sentences[:32]))  # warm-up: allocator, first-call work
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    list(embedder.embed_sentences(sentences))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"threads": count, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
            "torch_threads": torch.get_num_threads(), "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
            "sentences_per_s": round(len(sentences) / wall, 1)}


def run_condition(lines: int, threads: int, env: dict, neighbour: bool, path: Path) -> dict:
    spinner = None
    if neighbour:  # one CPU-bound process for the whole condition, started first
        spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=900)])
        time.sleep(0.5)
    try:
        full_env = {**{k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}, **env}
        out = subprocess.run([sys.executable, __file__, "--worker", str(threads), "--lines", str(lines),
                              "--input", str(path)], env=full_env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=400)
    ap.add_argument("--input", type=Path, default=CORPUS)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--only", help="comma-separated indexes of the policies to run (default: all)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.lines, args.worker, args.input)))
        return
    picked = [POLICIES[int(i)] for i in args.only.split(",")] if args.only else POLICIES
    rows = []
    for neighbour in (False, True):
        for label, threads, env in picked:
            row = {"condition": label, "beside a CPU-bound process": neighbour, "env": env,
                   **run_condition(args.lines, threads, env, neighbour, args.input)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        args.out.write_text(json.dumps({"lines": args.lines, "input": str(args.input), "load_after": os.getloadavg(),
                                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
