"""int8 beside float32 embedding on the CPU, measured in one run (issue #49).

    python benchmarks/int8_speed.py --shapes bundled,original --threads 1,2 --passes 5 \\
        --out benchmarks/results/int8-speed-cpu.json
    python benchmarks/int8_speed.py --render benchmarks/results/int8-speed-cpu.json

For each shape, thread count and order (file order, or sorted by length), `benchmarks/speed.py
worker embed` runs once with float32 and once with `--precision int8`, one after the other, each in
its own process (so peak RSS is per measurement): a warm-up of two batches, then --passes passes
over the sentences (the first --sentences lines of ../shared/data/wiki_corpus/valid.txt, as
benchmarks/speed.py), tokens/s the median. `bundled` is the bundled default model; `original` the
published ELMo's shapes with random weights (`torch.manual_seed(0)`, as benchmarks/speed.py). Also
reported: the weights that int8 converts, in float32 and in int8 (`elmo.model.int8.weight_bytes`), and
the cosine of the int8 vectors to the float32 ones on the first 64 sentences.

    python benchmarks/int8_speed.py --process --shapes original --threads 2 --sentences 400 --passes 3 \\
        --before OLD/src --out benchmarks/results/int8-process-cpu.json

times whole `elmo embed` processes (start-up included), float32 and int8, on old and new code in turn
(`git archive <commit> src | tar -x -C DIR` makes an old code's folder), with each process's own peak RSS.

    python benchmarks/int8_speed.py --kernels [--threads 1]

times one matrix product at the LSTM's shapes (rows x in x out) with each candidate kernel: float32
MKL and oneDNN (packed weight, as `LstmLayer` uses it), ours (`elmo.model.int8.Int8Linear`: fbgemm with
per-row activation scales), fbgemm's plain dynamic linear (one scale per tensor: faster, but a row's
result would depend on its batch), oneDNN's dynamic int8 linear, `torch._int_mm`, and torchao's int8
dynamic-activation linear if torchao is installed (it is not a dependency). Median of repeated calls for about a second each.
"""

from __future__ import annotations

import argparse
import json
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
    REPO,
    SENTENCES,
    SPEED_WORKER,
    embed_process,
    machine,
    random_model,
    run_json,
    save_results,
    write_sentences,
)

from elmo import load_bilm
from elmo.model.int8 import Int8Linear, quantize_bilm, token_cosines, weight_bytes
from elmo.models import resolve

SHAPES = ("bundled", "original", "small")
KERNEL_SHAPES = [(64, 512, 16384), (64, 4096, 512), (16, 512, 16384), (4, 512, 16384), (2048, 512, 16384)]


def median_seconds(fn, budget: float = 1.0) -> float:
    fn(), fn()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < budget:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def kernel_candidates(rows: int, weight: torch.Tensor) -> dict:
    """name -> a function of x (rows, in) computing x @ weight (in, out) in that kernel's way."""
    from elmo.model.lstm_kernels import onednn_linear, onednn_pack

    ours = Int8Linear(weight)
    packed = onednn_pack(weight.t().contiguous(), rows)
    candidates = {"fp32 MKL": lambda x: x @ weight, "fp32 oneDNN packed": lambda x: onednn_linear(x, packed),
                  "int8 ours (fbgemm, per-row)": ours,
                  "int8 fbgemm per-tensor": lambda x: torch.ops.quantized.linear_dynamic(x, ours._packed, True)}
    if "onednn" in torch.backends.quantized.supported_engines:  # oneDNN's int8 path (VNNI where the CPU has it)
        candidates["int8 oneDNN per-tensor"] = _onednn_dynamic(weight)
    if rows <= 64:  # a reference loop on this build's CPU (0.2-3 GFLOP/s): 2048 rows would take minutes
        w_int8 = torch.randint(-127, 128, weight.shape, dtype=torch.int8)
        candidates["int8 torch._int_mm"] = lambda x: torch._int_mm(x.to(torch.int8), w_int8)
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
        linear = torch.nn.Linear(*weight.shape, bias=False)
        quantize_(linear, Int8DynamicActivationInt8WeightConfig())
        candidates["int8 torchao dynamic"] = linear
    except ImportError:
        pass
    return candidates


def _onednn_dynamic(weight: torch.Tensor):
    """oneDNN's dynamic int8 linear (per-tensor activations, per-channel weights), prepacked with its engine."""
    w = weight.t().contiguous()
    scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12).double()
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = "onednn"
    try:
        q = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(q, None)
    finally:
        torch.backends.quantized.engine = before

    def run(x):
        torch.backends.quantized.engine = "onednn"
        try:
            return torch.ops.quantized.linear_dynamic(x, packed, True)
        finally:
            torch.backends.quantized.engine = before
    return run


MACHINE_INT8 = ("int8 fbgemm per-tensor", "int8 oneDNN per-tensor", "int8 torch._int_mm", "int8 torchao dynamic")


def time_kernels(threads: int) -> None:
    torch.set_num_threads(threads)
    print(f"{threads} thread(s), torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}; GFLOP/s\n")
    names = None
    for rows, n_in, n_out in KERNEL_SHAPES:
        torch.manual_seed(0)
        x, weight = torch.randn(rows, n_in), torch.randn(n_in, n_out) * 0.05
        candidates = kernel_candidates(rows, weight)
        with torch.no_grad():
            rates = {name: 2 * rows * n_in * n_out / median_seconds(lambda f=fn, x=x: f(x)) / 1e9
                     for name, fn in candidates.items()}
        if names is None:
            names = list(rates)
            print("| rows x in x out | " + " | ".join(names) + " | ours / best fp32 | ours / best int8 of torch |")
            print("|---|" + "---:|" * (len(names) + 2))
        best = max(rates["fp32 MKL"], rates["fp32 oneDNN packed"])
        ours = rates["int8 ours (fbgemm, per-row)"]
        best_int8 = max(rate for name, rate in rates.items() if name in MACHINE_INT8)
        print(f"| {rows} x {n_in} x {n_out} | " + " | ".join(f"{rates[n]:.1f}" if n in rates else "not run" for n in names)
              + f" | x{ours / best:.2f} | {ours / best_int8:.2f} |", flush=True)


def time_processes(args, work: Path) -> dict:
    """Whole `elmo embed` processes (start-up included), float32 and int8, on each code in turn (old and new
    alternating, --passes turns); medians of wall time and of each process's own peak RSS."""
    sentence_file, lines = write_sentences(work, args.sentences)
    codes = {Path(src).resolve().parent.name: str(Path(src).resolve()) for src in args.before}
    codes["new"] = str(REPO / "src")
    results = {"machine": machine(),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
               "sentences": len(lines), "tokens": sum(len(line.split()) for line in lines), "passes": args.passes,
               "batch_size": args.batch_size, "codes": sorted(codes), "rows": []}  # labels: a path is this machine's
    for shape in [s for s in args.shapes.split(",") if s]:
        options, weights = model_files(shape, work)
        for threads in [int(t) for t in args.threads.split(",")]:
            runs: dict[tuple[str, str], list[dict]] = {}
            for _ in range(args.passes):
                for label, src in codes.items():
                    for precision, flags in (("fp32", []), ("int8", ["--int8"])):
                        flags = ["--options", str(options), "--weights", str(weights), "--all",
                                 "--batch-size", str(args.batch_size), *flags]
                        got = embed_process(src, sentence_file, work / "out.hdf5", flags, threads)
                        runs.setdefault((label, precision), []).append(got)
            for label in codes:
                row = {"shape": shape, "threads": threads, "code": label}
                for precision in ("fp32", "int8"):
                    got = runs[(label, precision)]
                    row[precision] = {key: statistics.median(r[key] for r in got) for key in ("process_s", "peak_rss_mb")}
                    row[precision]["all_s"] = [round(r["process_s"], 2) for r in got]
                    row[precision]["fastest_s"] = min(r["process_s"] for r in got)
                row["speedup"] = row["fp32"]["process_s"] / row["int8"]["process_s"]
                row["rss_ratio"] = row["int8"]["peak_rss_mb"] / row["fp32"]["peak_rss_mb"]
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
    return results


def process_table(results: dict) -> str:
    lines = [f"{results['machine']}; {results['date']}; torch {results['torch']}; {results['sentences']} sentences "
             f"({results['tokens']:,} tokens), batch {results['batch_size']}, medians of {results['passes']} turns\n",
             "| shape | threads | code | fp32 process s | int8 process s | int8 speed-up | fp32 peak RSS MB | "
             "int8 peak RSS MB | int8 / fp32 RSS |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results["rows"]:
        lines.append(f"| {r['shape']} | {r['threads']} | {r['code']} | {r['fp32']['process_s']:.1f} | "
                     f"{r['int8']['process_s']:.1f} | x{r['speedup']:.2f} | {r['fp32']['peak_rss_mb']:,.0f} | "
                     f"{r['int8']['peak_rss_mb']:,.0f} | {r['rss_ratio']:.2f} |")
    return "\n".join(lines)


def model_files(shape: str, work: Path) -> tuple[Path, Path]:
    """options.json and weights.hdf5 of a shape: the bundled model's own, or random weights (seed 0)."""
    if shape == "bundled":
        files = resolve("default").original_files()
        return Path(files.options_file), Path(files.weight_file)
    return random_model(shape, work / shape)


def cosines(fp32_dump: str, int8_dump: str) -> tuple[float, float]:
    """Mean and minimum over all tokens and layers of cos(int8, float32) in two workers' dumps."""
    a, b = np.load(fp32_dump), np.load(int8_dump)
    cos = np.concatenate([token_cosines(a[k], b[k]).ravel() for k in a.files])
    return float(cos.mean()), float(cos.min())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="bundled,original", help=f"any of {', '.join(SHAPES)}")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--orders", default="file,sorted")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--out", default=str(HERE / "results" / "int8-speed-cpu.json"))
    p.add_argument("--render", metavar="JSON", help="measure nothing: print the table of a results file")
    p.add_argument("--kernels", action="store_true", help="time one product per kernel at the LSTM's shapes instead")
    p.add_argument("--process", action="store_true",
                   help="time whole `elmo embed` processes (start-up included) instead, fp32 and int8, old and new code")
    p.add_argument("--before", action="append", default=[], help="with --process: an older code's src/ folder")
    args = p.parse_args()
    if args.process:
        if args.render:
            print(process_table(json.loads(Path(args.render).read_text())))
            return
        results = time_processes(args, Path(tempfile.mkdtemp(prefix="elmo-int8-process-")))
        save_results(results, Path(args.out))
        print(process_table(results))
        return
    if args.kernels:
        for threads in [int(t) for t in args.threads.split(",")]:
            time_kernels(threads)
        return
    if args.render:
        print(markdown_table(json.loads(Path(args.render).read_text())))
        return
    if not SENTENCES.exists():
        sys.exit(f"needs {SENTENCES}")
    work = Path(tempfile.mkdtemp(prefix="elmo-int8-speed-"))
    sentence_file, lines = write_sentences(work, args.sentences)
    results = {"machine": {"platform": platform.platform(), "processor": platform.processor(), "torch": torch.__version__,
                           "cpu_capability": torch.backends.cpu.get_cpu_capability()},
               "sentences": len(lines), "tokens": sum(len(line.split()) for line in lines),
               "batch_size": args.batch_size, "passes": args.passes, "rows": []}
    out = Path(args.out)
    me = [*SPEED_WORKER, "embed"]
    for shape in [s for s in args.shapes.split(",") if s]:
        if shape not in SHAPES:
            sys.exit(f"--shapes: expected any of {SHAPES}, found {shape!r}")
        options, weights = model_files(shape, work)
        bilm = load_bilm(options, weights)
        quantize_bilm(bilm)
        fp32_bytes, int8_bytes = weight_bytes(bilm)
        del bilm
        for threads in [int(t) for t in args.threads.split(",")]:
            for order in [o for o in args.orders.split(",") if o]:
                common = ["--options", str(options), "--weights", str(weights), "--sentences", str(sentence_file),
                          "--threads", str(threads), "--order", order, "--passes", str(args.passes),
                          "--batch-size", str(args.batch_size)]
                runs = {precision: run_json(me + ["--precision", precision, "--dump", str(work / f"{precision}.npz")]
                                            + common) for precision in ("fp32", "int8")}
                mean, worst = cosines(str(work / "fp32.npz"), str(work / "int8.npz"))
                row = {"shape": shape, "threads": threads, "order": order, "fp32": runs["fp32"], "int8": runs["int8"],
                       "speedup": runs["int8"]["tokens_per_s"] / runs["fp32"]["tokens_per_s"],
                       "weight_bytes": {"fp32": fp32_bytes, "int8": int8_bytes},
                       "cosine_first_sentences": {"mean": mean, "min": worst}}
                results["rows"].append(row)
                print(table_row(row), flush=True)
                save_results(results, out)
    print()
    print(markdown_table(results))


def table_row(row: dict) -> str:
    f, q, w = row["fp32"], row["int8"], row["weight_bytes"]
    return (f"| {row['shape']} | {row['threads']} | {row['order']} | {f['tokens_per_s']:,.0f} | {q['tokens_per_s']:,.0f} "
            f"| x{row['speedup']:.2f} | {f['peak_rss_mb']:,.0f} MB / {q['peak_rss_mb']:,.0f} MB "
            f"| {w['fp32'] / 2**20:,.1f} MB / {w['int8'] / 2**20:,.1f} MB ({w['int8'] / w['fp32']:.2f}) "
            f"| {row['cosine_first_sentences']['mean']:.5f} / {row['cosine_first_sentences']['min']:.5f} |")


def markdown_table(results: dict) -> str:
    head = (f"{results['sentences']:,} sentences, {results['tokens']:,} tokens, batch {results['batch_size']}, "
            f"median of {results['passes']} passes; torch {results['machine']['torch']}, "
            f"{results['machine']['cpu_capability']}\n\n"
            "| shape | threads | order | fp32 tok/s | int8 tok/s | int8 / fp32 | peak RSS fp32 / int8 "
            "| converted weights fp32 / int8 | cosine int8 to fp32, mean / min |\n"
            "|---|---:|---|---:|---:|---:|---:|---:|---:|")
    return "\n".join([head] + [table_row(row) for row in results["rows"]])


if __name__ == "__main__":
    main()
