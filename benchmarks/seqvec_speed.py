"""SeqVec on CPU: residues per second at SeqVec's shapes (float32 and int8, 1 and 2 threads, beside AllenNLP's
`_ElmoBiLm`), int8's cosine to float32 per residue, and peak memory against protein length (docs/proteins.md).

    python benchmarks/seqvec_speed.py speed  --peer-python PEER_VENV/bin/python   # the table; under 8 minutes
    python benchmarks/seqvec_speed.py memory     # peak RSS vs length and the PNG (1 thread; about 10 minutes)
    python benchmarks/seqvec_speed.py replot     # the PNG again from benchmarks/results/seqvec_memory.json

The model is SeqVec's shapes with random weights (`elmo.proteins.write_random_model`, seed 0): the work per residue
is the real model's, the values are not. Proteins: PROTEINS random sequences of the 20 standard residues with
lengths drawn from a log-normal of median 300 (the usual UniProt range), seed 1, embedded longest first in
bio_embeddings' batches (max_amino_acids 15000), stateless (each batch from zero state, both sides). Every
configuration runs in its own process, timed after one warm-up batch. PEER_VENV: ../shared/tools/allennlp-peer-venv.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
PROTEINS, MEDIAN_LENGTH, MAX_AMINO_ACIDS = 12, 300, 15000
MEMORY_LENGTHS = (1000, 5000, 35000)
ONE_PIECE_LENGTHS = (1000, 5000)  # 35,000 in one piece: about 3.3 GB by the slope measured up to 5,000 (not run)
# SEQVEC_BENCH_TINY=1: a small model and short proteins, to try the script out in seconds (results in the temp dir)
TINY = os.environ.get("SEQVEC_BENCH_TINY") == "1"
TINY_OPTIONS = {"lstm": {"use_skip_connections": True, "projection_dim": 16, "cell_clip": 3, "proj_clip": 3, "dim": 32,
                         "n_layers": 2},
                "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 4], [3, 12]], "n_highway": 2,
                             "embedding": {"dim": 4}, "n_characters": 262, "max_characters_per_token": 50}}
if TINY:
    PROTEINS, MEMORY_LENGTHS, ONE_PIECE_LENGTHS = 4, (600, 1200, 2400), (600, 1200)
PEAK_RSS = "[int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0] / 1024"


def proteins(count: int = PROTEINS, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(MEDIAN_LENGTH), 0.6, size=count).astype(int), 30, 2000)
    seqs = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=n)) for n in lengths]
    return sorted(seqs, key=len, reverse=True)


def batches(seqs: list[str]) -> list[list[str]]:
    from elmo.proteins.seqvec import residue_batches

    return list(residue_batches(seqs, MAX_AMINO_ACIDS))


def worker_ours(args) -> dict:
    """One process: our SeqVecEmbedder (stateless) on the proteins; residues/s and (optionally) the vectors."""
    from elmo.model.threads import set_threads
    from elmo.proteins import SeqVecEmbedder

    set_threads(args.threads)
    embedder = SeqVecEmbedder(options_file=args.options, weights_file=args.weights, stateful=False, int8=args.int8,
                              use_cpu=True)
    seqs = proteins()
    list(embedder.embed_batch(seqs[-2:]))  # warm-up
    start = time.perf_counter()
    out = [v for batch in batches(seqs) for v in embedder.embed_batch(batch)]
    seconds = time.perf_counter() - start
    if args.dump:
        np.savez(args.dump, *out)
    return {"residues_per_s": sum(map(len, seqs)) / seconds, "seconds": seconds}


def worker_peer(args) -> dict:
    """One process in the AllenNLP peer venv: `_ElmoBiLm` (states reset per batch) on the same batches."""
    import torch
    from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids

    torch.set_num_threads(args.threads)
    bilm = _ElmoBiLm(args.options, args.weights, requires_grad=False).eval()
    seqs = proteins()
    groups, batch, total = [], [], 0  # residue_batches' rule, written out: this venv has no elmo
    for s in seqs:
        if total + len(s) >= MAX_AMINO_ACIDS and batch:
            groups.append(batch)
            batch, total = [], 0
        batch.append(s)
        total += len(s)
    groups.append(batch)
    with torch.no_grad():
        bilm(batch_to_ids([list(s) for s in seqs[-2:]]))
        start = time.perf_counter()
        for group in groups:
            bilm._elmo_lstm.reset_states()
            bilm(batch_to_ids([list(s) for s in group]))
        seconds = time.perf_counter() - start
    return {"residues_per_s": sum(map(len, seqs)) / seconds, "seconds": seconds}


def worker_memory(args) -> dict:
    """One process: one protein of `--length` residues, stateless, in windows or in one piece; peak RSS."""
    from elmo.model.threads import set_threads
    from elmo.proteins import SeqVecEmbedder

    set_threads(args.threads)
    embedder = SeqVecEmbedder(options_file=args.options, weights_file=args.weights, stateful=False, use_cpu=True,
                              window=args.length + 1 if args.one_piece else 512)
    before = eval(PEAK_RSS)  # noqa: S307 (our constant expression): the model loaded
    sequence = "".join(np.random.default_rng(args.length).choice(list("ACDEFGHIKLMNPQRSTVWY"), size=args.length))
    start = time.perf_counter()
    vectors = embedder.embed(sequence)
    seconds = time.perf_counter() - start
    if args.dump:
        np.save(args.dump, vectors[:, :: 64])
    return {"length": args.length, "one_piece": args.one_piece, "peak_rss_mb": eval(PEAK_RSS),  # noqa: S307
            "model_loaded_rss_mb": before, "seconds": seconds}


def run(python: str, mode: str, files, threads: int, *extra: str) -> dict:
    from benchlib import code_env, run_json  # the parent only: a worker may be AllenNLP's python

    cmd = [python, str(Path(__file__).resolve()), mode, "--options", str(files.options_file), "--weights",
           str(files.weight_file), "--threads", str(threads), *extra]
    return run_json(cmd, env=code_env(str(REPO / "src"), threads))


def cosines(fp32: str, int8: str) -> dict:
    a, b = np.load(fp32), np.load(int8)
    per_layer = []
    for layer in range(3):
        cos = np.concatenate([np.sum(a[k][layer] * b[k][layer], -1) / (
            np.linalg.norm(a[k][layer], axis=-1) * np.linalg.norm(b[k][layer], axis=-1)) for k in a.files])
        per_layer.append({"mean": float(cos.mean()), "min": float(cos.min())})
    return {"per_layer": per_layer}


def speed(args, files, work: Path) -> dict:
    rows = []
    for threads in (1, 2):
        for name, python, mode, extra in (("elmo float32", sys.executable, "ours", []),
                                          ("elmo int8", sys.executable, "ours", ["--int8"]),
                                          ("AllenNLP 2.10.1 _ElmoBiLm", args.peer_python, "peer", [])):
            if python is None:
                continue
            dump = ["--dump", str(work / f"{name.split()[-1]}-{threads}.npz")] if mode == "ours" and threads == 1 else []
            rows.append({"config": name, "threads": threads, **run(python, mode, files, threads, *extra, *dump)})
            print(json.dumps(rows[-1]), flush=True)
    return {"rows": rows, "int8_cosine": cosines(str(work / "float32-1.npz"), str(work / "int8-1.npz")),
            "residues": sum(map(len, proteins())), "proteins": PROTEINS}


def memory(files, work: Path) -> dict:
    rows = []
    for length in MEMORY_LENGTHS:
        for one_piece in (False, True):
            if one_piece and length not in ONE_PIECE_LENGTHS:
                continue
            dump = work / f"m-{length}-{one_piece}.npy"
            extra = ["--length", str(length), "--dump", str(dump)] + (["--one-piece"] if one_piece else [])
            rows.append(run(sys.executable, "memory-worker", files, 1, *extra))
            print(json.dumps(rows[-1]), flush=True)
        if length in ONE_PIECE_LENGTHS:
            rows[-1]["max_abs_diff_windows_vs_one_piece"] = float(np.abs(
                np.load(work / f"m-{length}-False.npy") - np.load(work / f"m-{length}-True.npy")).max())
    return {"rows": rows}


def state_difference(files) -> dict:
    """Stateful after bio_embeddings' warm-up (the default) against stateless, on the four shortest proteins in one
    batch: per-residue cosine and the largest difference relative to the largest value, per layer."""
    from elmo.model.threads import set_threads
    from elmo.proteins import SeqVecEmbedder

    set_threads(1)
    seqs = proteins()[-4:]
    got = {}
    for stateful in (True, False):
        embedder = SeqVecEmbedder(options_file=files.options_file, weights_file=files.weight_file, stateful=stateful)
        got[stateful] = list(embedder.embed_many(seqs, MAX_AMINO_ACIDS))
        del embedder
    layers = []
    for layer in range(3):
        a = np.concatenate([g[layer] for g in got[True]])
        b = np.concatenate([g[layer] for g in got[False]])
        cos = np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
        layers.append({"cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
                       "max_abs_diff_over_max": float(np.abs(a - b).max() / np.abs(b).max())})
    return {"proteins": [len(x) for x in seqs], "per_layer": layers}


def plot(results: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for one_piece, label, style in ((False, "stateless: windows of 512 residues", "o-"),
                                    (True, "one piece (AllenNLP; the carried-state default)", "s--")):
        pts = [(r["length"], r["peak_rss_mb"]) for r in results["rows"] if r["one_piece"] == one_piece]
        ax.plot(*zip(*pts), style, label=label)
    ax.axhline(results["rows"][0]["model_loaded_rss_mb"], color="grey", lw=0.8, label="model loaded")
    ax.set(xlabel="protein length (residues)", ylabel="peak RSS (MB)", title="SeqVec shapes, float32, 1 thread")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["speed", "memory", "replot", "ours", "peer", "memory-worker"])
    p.add_argument("--peer-python", help="the AllenNLP peer venv's python (speed: its column)")
    p.add_argument("--options")
    p.add_argument("--weights")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--int8", action="store_true")
    p.add_argument("--dump")
    p.add_argument("--length", type=int)
    p.add_argument("--one-piece", action="store_true")
    args = p.parse_args()
    workers = {"ours": worker_ours, "peer": worker_peer, "memory-worker": worker_memory}
    if args.mode in workers:
        print(json.dumps(workers[args.mode](args)))
        return
    if args.mode == "replot":  # the PNG again from results/seqvec_memory.json
        plot(json.loads((RESULTS / "seqvec_memory.json").read_text()), REPO / "docs" / "proteins-memory.png")
        return
    from elmo.proteins import write_random_model

    with tempfile.TemporaryDirectory() as tmp:
        files = write_random_model(Path(tmp) / "seqvec", TINY_OPTIONS if TINY else None, seed=0)
        if args.mode == "speed":
            results = speed(args, files, Path(tmp))
        else:
            results = {**memory(files, Path(tmp)), "state_difference": state_difference(files)}
    results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = Path(tempfile.gettempdir()) / f"seqvec_{args.mode}-tiny.json" if TINY else RESULTS / f"seqvec_{args.mode}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(out)
    if args.mode == "memory":
        plot(results, Path(tempfile.gettempdir()) / "proteins-memory-tiny.png" if TINY else
             REPO / "docs" / "proteins-memory.png")


if __name__ == "__main__":
    main()
