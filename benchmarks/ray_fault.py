"""The fault run: `elmo embed-dataset` on a two-node Ray cluster on one machine (two raylets, 127.0.0.1), the
second node's processes killed (SIGKILL) when half of the parts are written. The job must finish with every id
exactly once and every vector equal to `elmo embed`'s (1e-6). Prints the recovery time and what Ray printed.

    python benchmarks/ray_fault.py --lines 2000 --part-rows 100 --out benchmarks/results/ray_fault.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki_corpus" / "valid.txt"


def parts_written(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []


def check_output(folder: Path, reference: Path, lines: int) -> dict:
    """Every id once, every vector `elmo embed`'s (the same parts: --part-lines = --part-rows)."""
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray.data  # noqa: F401  (Ray's tensor types, for reading the parts)

    from elmo.integrations.ray import read_vectors

    table = pa.concat_tables([pq.read_table(p) for p in parts_written(folder)])
    ids = table.column("id").to_pylist()
    worst = 0.0
    with h5py.File(reference) as f:
        for i, vectors in zip(ids, read_vectors(table)):
            worst = max(worst, float(np.abs(vectors - f[str(i)][()]).max()) if vectors.size else 0.0)
    return {"rows": len(ids), "distinct_ids": len(set(ids)), "ids_expected": lines,
            "every_id_once": sorted(ids) == list(range(lines)), "max_abs_diff_vs_elmo_embed": worst}


def run(args: argparse.Namespace, work: Path) -> dict:
    from elmo.integrations.ray_dataset import local_only

    local_only()  # both nodes, and the driver started below (it inherits this environment), on 127.0.0.1
    from ray.cluster_utils import Cluster

    text = work / "lines.txt"
    with args.input.open(encoding="utf-8") as f:
        text.write_text("".join(line for _, line in zip(range(args.lines), f)), encoding="utf-8")
    reference = work / "reference.hdf5"
    done = subprocess.run([sys.executable, "-m", "elmo", "embed", str(text), str(reference), "--top", "--pool", "mean",
                           "--part-lines", str(args.part_rows), "--threads", "1"], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"elmo embed failed: {done.stderr[-2000:]}")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "node_ip_address": "127.0.0.1"})
    second = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    out, log = work / "out", work / "driver.log"
    total = -(-args.lines // args.part_rows)
    started = time.perf_counter()
    with log.open("w") as log_file:
        driver = subprocess.Popen([sys.executable, "-m", "elmo", "embed-dataset", str(text), str(out), "--top",
                                   "--pool", "mean", "--part-rows", str(args.part_rows), "--actors", "2",
                                   "--address", cluster.address], stdout=log_file, stderr=subprocess.STDOUT)
        while len(parts_written(out)) < total // 2 and driver.poll() is None:
            time.sleep(0.05)
        killed_at, parts_at_kill = time.perf_counter(), len(parts_written(out))
        cluster.remove_node(second, allow_graceful=False)  # SIGKILL: its raylet, its workers, its object store
        next_part = None
        while driver.poll() is None:
            if next_part is None and len(parts_written(out)) > parts_at_kill:
                next_part = time.perf_counter()
            time.sleep(0.05)
    finished = time.perf_counter()
    cluster.shutdown()
    printed = log.read_text(errors="replace")
    return {"lines": args.lines, "part_rows": args.part_rows, "parts": total, "driver_exit": driver.returncode,
            "parts_when_killed": parts_at_kill, "killed_after_s": round(killed_at - started, 2),
            "first_part_after_kill_s": None if next_part is None else round(next_part - killed_at, 2),
            "kill_to_finish_s": round(finished - killed_at, 2), "wall_s": round(finished - started, 2),
            **check_output(out, reference, args.lines),
            "ray_printed": [line for line in printed.splitlines() if "rows/s" not in line and line.strip()][-40:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--part-rows", type=int, default=100)
    ap.add_argument("--input", type=Path, default=CORPUS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="elmo-ray-fault-") as work:
        result = run(args, Path(work))
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(json.dumps({k: v for k, v in result.items() if k != "ray_printed"}, indent=1))
    print("\n".join(result["ray_printed"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if not (result["driver_exit"] == 0 and result["every_id_once"] and result["max_abs_diff_vs_elmo_embed"] <= 1e-6):
        sys.exit(1)


if __name__ == "__main__":
    main()
