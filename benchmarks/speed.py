"""Embedding and training throughput, ours beside AllenNLP 2.10.1, measured in one run.

    python benchmarks/speed.py --peer-python /path/to/allennlp-venv/bin/python

Same weights (random, fixed seed, written in the original HDF5 format) and the same sentences (the
first 1,000 lines of ../shared/data/wiki_corpus/valid.txt) for both. Every measurement runs in its
own subprocess, so peak RSS is per measurement; times are medians of several passes after a
warm-up. Prints a table and writes benchmarks/results/speed-<device>.json. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchlib import (
    HERE,
    SENTENCES,
    SPEED_WORKER,
    gemm_flops_around,
    gemm_flops_in_child,
    gpu_peak_mb,
    max_diff,
    options_for,
    peak_rss_mb,
    random_model,
    run_json,
    save_results,
    sync,
    write_sentences,
)

from elmo.training.presets import preset_options

# ---- workers (each in its own process) --------------------------------------------------------

def worker_embed(args) -> dict:
    from elmo import Embedder

    torch.set_num_threads(args.threads)
    sentences = [line.split() for line in Path(args.sentences).read_text(encoding="utf-8").splitlines()]
    if args.order == "sorted":
        sentences.sort(key=len, reverse=True)
    embedder = Embedder.from_files(args.options, args.weights, device=args.device, batch_size=args.batch_size,
                                   bf16=args.precision == "bf16", int8=args.precision == "int8")

    def run_all(subset=sentences):
        embedder.bilm.token_cache.clear()  # each pass starts cold, as one run over a file does
        for _ in embedder.embed_sentences(subset, layers="all", batch_size=args.batch_size):
            pass

    run_all(sentences[: 2 * args.batch_size])  # warm-up: two batches
    limits = [gemm_flops_around(args.threads, args.device, args.precision)]
    times = []
    for _ in range(args.passes):
        start = time.perf_counter()
        run_all()
        times.append(time.perf_counter() - start)
    limits.append(gemm_flops_around(args.threads, args.device, args.precision))
    if args.dump:
        first = [line.split() for line in Path(args.sentences).read_text(encoding="utf-8").splitlines()][: args.dump_sentences]
        np.savez(args.dump, **{str(i): a for i, a in enumerate(embedder.embed_batch(first))})
    tokens = sum(len(s) for s in sentences)
    return {"impl": "elmo", "order": args.order, "threads": args.threads, "precision": args.precision,
            "batch_size": args.batch_size, "tokens": tokens, "seconds": statistics.median(times),
            "tokens_per_s": tokens / statistics.median(times), "passes": times, "gpu_peak_mb": gpu_peak_mb(args.device),
            "gemm_flops_before_after": limits}


def worker_train(args) -> dict:
    """Forward + backward + Adagrad step with sampled softmax on 128 x 20 token windows (bilm-tf batching):
    `elmo train`'s own step function (trainer.train_step), with its rank all-reduce and finiteness checks."""
    from torch.nn.parallel import DistributedDataParallel

    from elmo.formats.lm_vocab import Vocab
    from elmo.model.allocator import keep_freed_memory
    from elmo.model.options import BiLMConfig
    from elmo.training import distributed
    from elmo.training.batchers import StreamBatcher
    from elmo.training.corpus import SentenceSource
    from elmo.training.model import LanguageModel
    from elmo.training.softmax import LogUniformSampler
    from elmo.training.state import TrainingState
    from elmo.training.trainer import StepRecipe, train_step

    torch.set_num_threads(args.threads)
    if args.device == "cpu":
        keep_freed_memory()  # as `elmo train` does
    rank, world, _ = distributed.setup(args.device)  # under torchrun: DistributedDataParallel, as `elmo train`
    torch.manual_seed(0)
    options = json.loads(Path(args.options).read_text())
    vocab = Vocab.load(args.vocab)
    generator = torch.Generator().manual_seed(rank)
    sampler = LogUniformSampler(len(vocab), args.negatives, generator)
    model = LanguageModel(BiLMConfig.from_options(options), len(vocab), dropout=0.1, sampler=sampler)
    model = model.to(args.device).train()
    trained = DistributedDataParallel(model) if world > 1 else model
    autocast = torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0)
    batcher = StreamBatcher(SentenceSource([args.sentences], seed=0), vocab, 128, 20)
    state = TrainingState(model, optimizer, batcher, generator, torch.device(args.device), rank, world)
    recipe = StepRecipe(trained, list(model.parameters()), unroll=20, clip_norm=10.0, autocast=autocast)

    def step():
        batch = batcher.next_batch().to(args.device)
        train_step(state, batch, recipe)
        return batch.n_tokens

    step()
    limits = [gemm_flops_around(args.threads, args.device, args.precision, world)]
    times, tokens = [], 0
    for _ in range(args.passes):
        sync(args.device)
        start = time.perf_counter()
        tokens = step()
        sync(args.device)
        times.append(time.perf_counter() - start)
    limits.append(gemm_flops_around(args.threads, args.device, args.precision, world))
    rss = distributed.gather(peak_rss_mb())
    distributed.teardown()
    if rank != 0:
        return None
    return {"impl": "elmo", "threads": args.threads, "processes": world, "precision": args.precision,
            "gpu_peak_mb": gpu_peak_mb(args.device), "tokens_per_step": tokens * world, "vocab": len(vocab),
            "negatives": args.negatives, "seconds_per_step": statistics.median(times),
            "tokens_per_s": tokens * world / statistics.median(times), "passes": times,
            "peak_rss_mb": sum(rss), "gemm_flops_before_after": limits}  # memory: all processes together


def run_worker(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="speed.py worker")
    p.add_argument("kind", choices=["embed", "train"])
    p.add_argument("--options", required=True)
    p.add_argument("--weights")
    p.add_argument("--vocab")
    p.add_argument("--negatives", type=int, default=8192)
    p.add_argument("--sentences", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--order", choices=["file", "sorted"], default="file")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16", "int8"], default="fp32")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dump")
    p.add_argument("--dump-sentences", type=int, default=64)
    args = p.parse_args(argv)
    result = {"embed": worker_embed, "train": worker_train}[args.kind](args)
    if result is None:  # a torchrun rank other than 0
        return
    result.setdefault("peak_rss_mb", peak_rss_mb())
    print(json.dumps(result))


# ---- orchestration ----------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        run_worker(sys.argv[2:])
        return
    args = _parser().parse_args()
    if args.render:
        results = json.loads(Path(args.render).read_text())
        print(markdown_tables(results))
        if args.plot:
            plot(results, args.plot)
        return
    if not SENTENCES.exists():
        sys.exit(f"needs {SENTENCES}")
    work = Path(tempfile.mkdtemp(prefix="elmo-speed-"))
    sentence_file, lines = write_sentences(work, args.sentences)
    threads = [int(t) for t in args.threads.split(",")]
    precisions = [x for x in args.precisions.split(",") if x]
    out = Path(args.out) if args.out else HERE / "results" / f"speed-{args.device.split(':')[0]}.json"
    results = start_results(args, lines, threads, precisions)
    for shape in [s for s in args.shapes.split(",") if s]:
        embedding_rows(args, shape, work, sentence_file, results, out)
    if args.train_shapes:
        training_rows(args, work, sentence_file, results, out)
    save_results(results, out)
    print(f"wrote {out}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer-python", help="python of the AllenNLP peer venv (../shared/tools/allennlp-peer-venv.sh DIR)")
    p.add_argument("--shapes", default="small,original", help="embedding shapes to time")
    p.add_argument("--train-shapes", default="tiny,small", help="presets whose training step is timed ('' for none)")
    p.add_argument("--train-negatives", type=int, default=None,
                   help="sampled-softmax negatives of the training rows (default: each preset's own, as `elmo train` "
                        "uses it: 8192 as the original recipe, 2048 for tiny)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--train-processes", default="1,2",
                   help="training rows also as N torchrun processes sharing the threads (CPU; DDP with gloo)")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=12,
                   help="timed training steps per row (median; a step is a fraction of a second, one pass is seconds)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]; the peer runs only on CPU")
    p.add_argument("--precisions", default="fp32", help="fp32,bf16 (bf16 autocast is for GPUs)")
    p.add_argument("--batch-size", type=int, default=64, help="embedding batch size (the issue's figures: 64)")
    p.add_argument("--out", default=None, help="JSON results file (default benchmarks/results/speed-<device>.json)")
    p.add_argument("--render", metavar="JSON", help="measure nothing: print the markdown tables of a results file "
                   "(the ones in docs/performance.md) and draw its chart (--plot)")
    p.add_argument("--plot", metavar="PNG", help="with --render: where to write the bar chart")
    return p


def start_results(args, lines: list[str], threads: list[int], precisions: list[str]) -> dict:
    """The results file's head: the machine, the text, and the GEMM limit at each thread count (printed)."""
    results = {"machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                           "torch": torch.__version__, "device": args.device,
                           "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None},
               "sentences": len(lines), "tokens": sum(len(line.split()) for line in lines),
               "batch_size": args.batch_size,
               "gemm_flops": {t: gemm_flops_in_child(t, args.device) for t in threads}, "embedding": [], "training": []}
    if "bf16" in precisions:
        results["gemm_flops_bf16"] = {t: gemm_flops_in_child(t, args.device, "bfloat16") for t in threads}
    for t in threads:
        print(f"GEMM limit, {t} thread(s): " + ", ".join(
            f"{p} {results['gemm_flops' + ('_bf16' if p == 'bf16' else '')][t] / 1e9:,.0f} GFLOP/s" for p in precisions),
            flush=True)
    return results


def row_limit(results: dict, t: int, precision: str, run: dict | None = None) -> float:
    """The row's own GEMM rate (mean of its worker's measurements before and after timing), else the run's."""
    if run and run.get("gemm_flops_before_after"):
        return statistics.mean(run["gemm_flops_before_after"])
    return results["gemm_flops_bf16" if precision == "bf16" else "gemm_flops"][t]


def embedding_rows(args, shape: str, work: Path, sentence_file: Path, results: dict, out: Path) -> None:
    """Embedding rows of one shape (random weights, seed 0): each thread count, order and precision, ours and
    (fp32, with --peer-python) AllenNLP's on the same files; saved after every row."""
    from elmo.model.options import BiLMConfig

    options, weights = random_model(shape, work / shape)
    flops = BiLMConfig.from_options(options_for(shape)).forward_flops_per_token
    precisions = [x for x in args.precisions.split(",") if x]
    for t in [int(t) for t in args.threads.split(",")]:
        for order in ("file", "sorted"):
            common = ["--options", str(options), "--weights", str(weights),
                      "--sentences", str(sentence_file), "--threads", str(t), "--order", order,
                      "--passes", str(args.passes), "--batch-size", str(args.batch_size)]
            dumps = {p: str(work / f"{shape}-{p}.npz") for p in precisions}
            peer_dump = str(work / f"{shape}-peer.npz")
            for precision in precisions:
                ours = run_json(SPEED_WORKER + ["embed", "--device", args.device, "--precision", precision,
                                                "--dump", dumps[precision]] + common)
                ours["gemm_limit"] = row_limit(results, t, precision, ours)
                ours["fraction_of_gemm_limit"] = ours["tokens_per_s"] * flops / ours["gemm_limit"]
                row = {"shape": shape, "threads": t, "order": order, "precision": precision,
                       "flops_per_token": flops, "ours": ours}
                if precision != "fp32" and "fp32" in dumps:
                    row["max_abs_diff_vs_fp32"] = max_diff(dumps[precision], dumps["fp32"])
                if args.peer_python and precision == "fp32":
                    peer = run_json([args.peer_python, str(HERE / "allennlp_worker.py"), "--dump", peer_dump] + common)
                    peer["fraction_of_gemm_limit"] = peer["tokens_per_s"] * flops / ours["gemm_limit"]
                    row.update(allennlp=peer, speedup=ours["tokens_per_s"] / peer["tokens_per_s"],
                               max_abs_diff=max_diff(dumps[precision], peer_dump))
                results["embedding"].append(row)
                print_embedding_row(row)
                save_results(results, out)


def training_rows(args, work: Path, sentence_file: Path, results: dict, out: Path) -> None:
    """Training-step rows of each --train-shapes preset: each thread count, process count (torchrun) and
    precision; saved after every row."""
    from elmo.formats.lm_vocab import write_vocab
    from elmo.model.options import BiLMConfig
    from elmo.training.vocab import build_vocab, count_tokens

    corpus = [str(SENTENCES), str(SENTENCES.with_name("test.txt"))]
    vocab_file = work / "vocab.txt"
    write_vocab(build_vocab(count_tokens(corpus), 1, None), vocab_file)
    threads = [int(t) for t in args.threads.split(",")]
    processes = [int(n) for n in args.train_processes.split(",")]
    precisions = [x for x in args.precisions.split(",") if x]
    for shape in args.train_shapes.split(","):
        options = preset_options(shape)
        options_file = work / f"train-{shape}.json"
        options_file.write_text(json.dumps(options))
        negatives = args.train_negatives or options.get("n_negative_samples_batch", 8192)
        flops = BiLMConfig.from_options(options).train_flops_per_token(negatives)
        for t, procs, precision in itertools.product(threads, processes, precisions):
            if t % procs or (procs > 1 and args.device != "cpu"):
                continue
            launch = SPEED_WORKER if procs == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                      f"--nproc_per_node={procs}", str(HERE / "speed.py"), "worker"]
            got = run_json(launch + ["train", "--options", str(options_file), "--vocab", str(vocab_file),
                                     "--sentences", str(sentence_file), "--threads", str(t // procs), "--passes",
                                     str(args.train_steps), "--negatives", str(negatives), "--device", args.device,
                                     "--precision", precision])
            got["gemm_limit"] = row_limit(results, t, precision, got)
            got["fraction_of_gemm_limit"] = got["tokens_per_s"] * flops / got["gemm_limit"]
            row = {"shape": shape, "threads": t, "processes": procs, "precision": precision,
                   "flops_per_token": flops, "ours": got}
            results["training"].append(row)
            print(f"train {shape:8s} threads={t} processes={procs} {precision} {got['tokens_per_s']:8.0f} tok/s "
                  f"({got['fraction_of_gemm_limit']:.0%} of {around(got)}, {got['peak_rss_mb']:.0f} MB)", flush=True)
            save_results(results, out)


def markdown_tables(results: dict) -> str:
    """The embedding and training tables of docs/performance.md, from a results file."""
    machine = results["machine"]
    gpu = machine.get("gpu")
    size = 8192 if gpu else 2048
    limits = {p: {int(t): f for t, f in results[k].items()} for p, k in (("fp32", "gemm_flops"), ("bf16", "gemm_flops_bf16"))
              if k in results}
    where = gpu or f"{machine.get('cpus')} CPUs"
    lines = [f"{results['sentences']:,} sentences, {results['tokens']:,} tokens, batch {results.get('batch_size', 64)}, "
             f"on {where}; GEMM limit ({size}^3 product): "
             + "; ".join(f"{p} " + ", ".join(f"{f / 1e9:,.0f} GFLOP/s at {t} thread{'s' if t > 1 else ''}"
                                             for t, f in sorted(lim.items())) for p, lim in limits.items())
             + " at the start of the run; a row's GEMM column is its worker's own rate before / after its timing, "
             "and its % of the limit uses their mean (rows without it use the run's)",
             "", "| shape | threads | order | ours tok/s | AllenNLP tok/s | speed-up | ours: % of GEMM limit "
             "| AllenNLP: % of limit | GEMM GFLOP/s | peak memory ours / AllenNLP | max abs diff |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def memory(run: dict) -> str:
        rss = f"{run['peak_rss_mb']:,.0f} MB"
        return rss + (f" (GPU {run['gpu_peak_mb']:,.0f} MB)" if run.get("gpu_peak_mb") else "")

    for row in results["embedding"]:
        ours, peer = row["ours"], row.get("allennlp")
        precision = row.get("precision", "fp32")
        diff = (f"{row['max_abs_diff']:.1e}" if peer else
                f"{row['max_abs_diff_vs_fp32']:.1e} vs our fp32" if "max_abs_diff_vs_fp32" in row else "")
        cells = [row["shape"], str(row["threads"]), row["order"] + ("" if precision == "fp32" else f", {precision}"),
                 f"{ours['tokens_per_s']:,.0f}", f"{peer['tokens_per_s']:,.0f}" if peer else "not run",
                 f"x{row['speedup']:.2f}" if peer else "", f"{ours['fraction_of_gemm_limit']:.0%}",
                 f"{peer['fraction_of_gemm_limit']:.0%}" if peer else "", measured_rates(ours),
                 f"{memory(ours)} / {memory(peer)}" if peer else memory(ours), diff]
        lines.append("| " + " | ".join(cells) + " |")
    if not results["embedding"]:
        del lines[-3:]  # no embedding rows: no empty table
    if results["training"]:
        lines += ["", "| preset | threads | precision | tokens/step | negatives | ours tok/s | train FLOP/token "
                  "| % of GEMM limit | GEMM GFLOP/s | peak memory |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in results["training"]:
            ours, procs = row["ours"], row.get("processes", 1)
            threads = f"{row['threads']}" + (f" ({procs} processes x {row['threads'] // procs}, DDP)" if procs > 1 else "")
            lines.append(f"| {row['shape']} | {threads} | {row.get('precision', 'fp32')} | "
                         f"{ours['tokens_per_step']:,} | {ours.get('negatives', 8192):,} | {ours['tokens_per_s']:,.0f} | "
                         f"{row['flops_per_token'] / 1e6:,.0f} M | {ours['fraction_of_gemm_limit']:.0%} | "
                         f"{measured_rates(ours)} | {memory(ours)} |")
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    """Bar chart: embedding tokens/s, ours beside AllenNLP, per shape, order and thread count."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["embedding"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    fig, axes = plt.subplots(1, len(shapes), figsize=(5.5 * len(shapes), 3.8), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        mine = [r for r in rows if r["shape"] == shape]
        labels = [f"{r['order']}" + (f" {r['precision']}" if r.get("precision", "fp32") != "fp32" else "")
                  + f"\n{r['threads']} thr" for r in mine]
        x = np.arange(len(mine))
        ours = [r["ours"]["tokens_per_s"] for r in mine]
        peer = [r["allennlp"]["tokens_per_s"] if "allennlp" in r else 0 for r in mine]
        if any(peer):
            ax.bar(x - 0.2, peer, 0.4, label="AllenNLP 2.10.1 _ElmoBiLm", color="#999999")
        ax.bar(x + 0.2, ours, 0.4, label="elmo (this package)", color="#2b6cb0")
        for xi, o, q in zip(x, ours, peer):
            if q:
                ax.text(xi + 0.2, o, f"x{o / q:.1f}", ha="center", va="bottom", fontsize=9)
        ax.set_xticks(x, labels)
        where = results["machine"].get("gpu") or "CPU"
        ax.set_title(f"{shape}: embedding, all layers, batch {results.get('batch_size', 64)}, {where}", fontsize=10)
        ax.set_ylabel("tokens / s")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def measured_rates(run: dict) -> str:
    """The GEMM rates (GFLOP/s) a worker measured before and after its timing, "" for older results."""
    return " / ".join(f"{r / 1e9:,.0f}" for r in run.get("gemm_flops_before_after", []))


def around(run: dict) -> str:
    return f"{measured_rates(run)} GFLOP/s" if run.get("gemm_flops_before_after") else "GEMM limit"


def print_embedding_row(row: dict) -> None:
    ours = row["ours"]
    text = (f"embed {row['shape']:8s} threads={row['threads']} {row['order']:6s} ours {ours['tokens_per_s']:7.0f} tok/s "
            f"({ours['fraction_of_gemm_limit']:.0%} of {around(ours)}, {ours['peak_rss_mb']:.0f} MB)")
    if "allennlp" in row:
        peer = row["allennlp"]
        text += (f" | AllenNLP {peer['tokens_per_s']:7.0f} tok/s ({peer['peak_rss_mb']:.0f} MB) | x{row['speedup']:.2f}"
                 f" | max|diff| {row['max_abs_diff']:.1e}")
    print(text, flush=True)


if __name__ == "__main__":
    main()
