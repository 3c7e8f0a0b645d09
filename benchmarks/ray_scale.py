"""Side by side on the same lines: `elmo embed` in one process at 1 and 2 threads, under torchrun with 2 ranks,
and `elmo embed-dataset` on Ray Data with 2 actors of 1 thread (a local cluster, started and stopped by the run).

Each condition is one command timed from its launch to its exit (start-up, model loading and the writes
included), alone or beside one CPU-bound process (`--neighbour spin`). Memory: the peak over the run of the
summed PSS of the command and every process below it (Ray's GCS, raylet and workers included), sampled 4 times
a second; PSS counts a shared page once, split among its processes.

    python benchmarks/ray_scale.py --lines 10000 --neighbour none --out benchmarks/results/ray_scale_quiet.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki_corpus"
SPIN = "import time\nend = time.time() + 3600\nwhile time.time() < end: pass\n"


def elmo(*args: str) -> list[str]:
    return [sys.executable, "-m", "elmo", *args]


def conditions(text: Path, work: Path, part: int) -> dict[str, list[str]]:
    """Parts of `part` lines, so that both ranks and both actors get work from the first lines on."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "elmo"]
    parts = ["--part-lines", str(part)]
    return {
        "one process, 1 thread": elmo("embed", str(text), str(work / "t1.hdf5"), "--threads", "1", *parts),
        "one process, 2 threads": elmo("embed", str(text), str(work / "t2.hdf5"), "--threads", "2", *parts),
        "torchrun, 2 ranks of 1 thread": torchrun + ["embed", str(text), str(work / "tr.hdf5"), *parts],
        "Ray Data, 2 actors of 1 thread": elmo("embed-dataset", str(text), str(work / "ray"), "--actors", "2",
                                               "--threads-per-actor", "1", "--part-rows", str(part), "--no-progress"),
    }


def tree_pss(root: int) -> int:
    """Summed PSS (bytes) of `root` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except OSError:
            continue
    return total


def timed(command: list[str], env: dict) -> dict:
    peak, done = [0], threading.Event()
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_pss(proc.pid))
            done.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed ({proc.returncode}):\n{err[-3000:]}")
    return {"wall_s": round(wall, 2), "peak_pss_mb": round(peak[0] / 2**20)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--neighbour", choices=("none", "spin"), default="none")
    ap.add_argument("--part", type=int, default=500, help="lines per part (elmo embed) and rows per part (Ray)")
    ap.add_argument("--only", help="comma-separated indexes of the conditions to run (default: all)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    rows = []
    with tempfile.TemporaryDirectory(prefix="elmo-ray-scale-") as tmp:
        work = Path(tmp)
        text = work / "lines.txt"
        sources = [CORPUS / "valid.txt", CORPUS / "test.txt"]
        lines = [line for src in sources for line in src.open(encoding="utf-8")][: args.lines]
        text.write_text("".join(lines), encoding="utf-8")
        tokens = sum(len(line.split()) for line in lines)
        picked = list(conditions(text, work, args.part).items())
        if args.only:
            picked = [picked[int(i)] for i in args.only.split(",")]
        for label, command in picked:
            spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if args.neighbour == "spin" else None
            try:
                result = timed(command, env)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            row = {"condition": label, "beside a CPU-bound process": spinner is not None, **result,
                   "sentences_per_s": round(len(lines) / result["wall_s"], 1),
                   "tokens_per_s": round(tokens / result["wall_s"]), "command": " ".join(command[1:])}
            print(json.dumps(row), flush=True)
            rows.append(row)
            for path in work.iterdir():  # each condition writes from scratch
                if path != text:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
    if args.out:
        args.out.write_text(json.dumps({"lines": len(lines), "tokens": tokens, "neighbour": args.neighbour,
                                        "part": args.part, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                        "load_after": os.getloadavg(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
