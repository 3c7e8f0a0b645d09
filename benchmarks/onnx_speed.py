"""ONNX Runtime beside our own code, float32 and int8, measured in one run (issue #65 item 2).

    python benchmarks/onnx_speed.py --shapes small,original --threads 1,2 --sentences 128 --passes 3 --rounds 3 \\
        --before OLD/src --out benchmarks/results/onnx-speed-cpu-1thread.json
    python benchmarks/onnx_speed.py --render benchmarks/results/onnx-speed-cpu-1thread.json
    python benchmarks/onnx_speed.py --shapes bundled,original --accuracy 1000 \\
        --out benchmarks/results/onnx-int8-accuracy.json

For each shape and thread count, four engines each run in their own process, one after the other:
ours float32 (`Embedder`), ours int8 (`Embedder(int8=True)`), ONNX Runtime float32 (the graph of
`elmo export-onnx`) and ONNX Runtime int8 (`export-onnx --int8`: its dynamic quantization). Every
engine embeds the same sentences (the first --sentences lines of ../shared/data/wiki_corpus/valid.txt)
in the same batches: sorted by length, --batch-size sentences each, as `Embedder` orders them. Compute
is tokens/s, the median of --passes passes after a warm-up batch; the whole process is the wall time
from spawn to exit (imports, model load or session creation, the passes) and its peak RSS. The ONNX
files are written before, untimed. Also: the largest difference of ONNX Runtime float32 from ours
float32, and each int8 engine's cosine to ours float32 (first 32 sentences, every token and layer).
`small` and `original` are the presets' shapes with random weights (`torch.manual_seed(0)`), as
benchmarks/int8_speed.py. `--rounds N` runs the engines N times in turn, each engine's rate the median
of all its passes; `--before OLD/src` (repeatable; `git archive <commit> src | tar -x -C OLD`) adds an
older code's int8 beside ours. Our int8 loads read the int8 store (`elmo.formats.int8_store`), which the run
writes first, untimed, in a cache folder of its own.

`--accuracy N` times nothing: per layer, the cosine of each int8 engine's token vectors to ours
float32 on the first N lines of wiki_corpus test.txt, summarised as scripts/int8_accuracy.py summarises ours (docs/performance.md#accuracy).
"""

from __future__ import annotations

import argparse
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
    PEAK_RSS_MB,
    SENTENCES,
    code_env,
    machine,
    random_model,
    save_results,
    timed_process,
    write_sentences,
)

ENGINES = ("ours fp32", "ours int8", "onnxruntime fp32", "onnxruntime int8")
SHAPES = ("small", "original", "bundled")
DUMP_SENTENCES = 32


def sorted_batches(lines: list[str], batch_size: int) -> list[list[list[str]]]:
    sentences = sorted((line.split() for line in lines), key=len, reverse=True)
    return [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]


def ours(model_dir: Path, int8: bool):
    from elmo import Embedder

    embedder = Embedder.from_files(model_dir / "options.json", model_dir / "weights.hdf5", int8=int8)
    return lambda batch: embedder.embed_batch(batch)


def onnxruntime_engine(onnx_file: Path, threads: int):
    import onnxruntime as ort

    from elmo import batch_to_ids

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])

    def run(batch):
        layers, _ = session.run(None, {"char_ids": batch_to_ids(batch).numpy()})
        return [layers[b, :, : len(s)] for b, s in enumerate(batch)]
    return run


def worker(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    lines = Path(args.sentences).read_text(encoding="utf-8").splitlines()
    if args.engine.startswith("ours"):
        embed = ours(Path(args.model_dir), args.engine.endswith("int8"))
    else:
        embed = onnxruntime_engine(Path(args.onnx), args.threads)
    load_s = time.perf_counter() - started
    batches = sorted_batches(lines, args.batch_size)
    tokens = sum(len(s) for batch in batches for s in batch)
    embed(batches[-1])  # warm-up
    times = []
    for _ in range(args.passes):
        start = time.perf_counter()
        for batch in batches:
            embed(batch)
        times.append(time.perf_counter() - start)
    first = [line.split() for line in lines[:DUMP_SENTENCES]]
    np.savez(args.dump, *embed(first))
    print(json.dumps({"tokens_per_s": tokens / statistics.median(times), "pass_s": times, "load_s": load_s,
                      "peak_rss_mb": eval(PEAK_RSS_MB)}))  # noqa: S307 (benchlib's constant expression)


def compare(reference: str, other: str) -> dict:
    from elmo.model.int8 import token_cosines

    a, b = np.load(reference), np.load(other)
    cos = np.concatenate([token_cosines(a[k], b[k]).ravel() for k in a.files if a[k].size])
    return {"max_abs_diff": max(float(np.abs(a[k] - b[k]).max(initial=0.0)) for k in a.files),
            "largest_value": max(float(np.abs(a[k]).max(initial=0.0)) for k in a.files),
            "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min())}


def model_dir(shape: str, work: Path) -> Path:
    if shape == "bundled":
        from elmo.models import resolve
        files = resolve("default").original_files()
        directory = work / "bundled"
        directory.mkdir()
        (directory / "options.json").symlink_to(Path(files.options_file).resolve())
        (directory / "weights.hdf5").symlink_to(Path(files.weight_file).resolve())
        return directory
    return random_model(shape, work / shape)[0].parent


def measure_shape(shape: str, threads_list: list[int], args, work: Path, sentence_file: Path, results: dict) -> None:
    """Every engine at each thread count, --rounds times in turn (so a change of machine load hits all
    alike); per engine the median pass over all rounds. The int8 store is written before, untimed: our
    int8 loads read it, as every load after a model's first does (docs/performance.md)."""
    from elmo import load_bilm
    from elmo.formats.onnx_export import export_onnx

    directory = model_dir(shape, work)
    bilm = load_bilm(directory / "options.json", directory / "weights.hdf5")
    files = {"fp32": work / f"{shape}.onnx", "int8": work / f"{shape}-int8.onnx"}
    export_s = {}
    for precision, path in files.items():
        start = time.perf_counter()
        export_onnx(bilm, path, int8=precision == "int8")
        export_s[precision] = time.perf_counter() - start
    del bilm
    load_bilm(directory / "options.json", directory / "weights.hdf5", int8=True)  # writes the int8 store
    codes = {"new": str(HERE.parent / "src")}
    codes.update({Path(s).resolve().parent.name: str(Path(s).resolve()) for s in args.before})
    engines = [("new", "ours fp32"), ("new", "ours int8"), *[(c, "ours int8") for c in codes if c != "new"],
               ("new", "onnxruntime fp32"), ("new", "onnxruntime int8")]
    for threads in threads_list:
        runs: dict[tuple[str, str], list[dict]] = {key: [] for key in engines}
        dumps = {key: str(work / f"{shape}-{threads}-{key[0]}-{key[1].replace(' ', '-')}.npz") for key in engines}
        for _ in range(args.rounds):
            for code, engine in engines:
                cmd = [sys.executable, __file__, "worker", "--engine", engine, "--model-dir", str(directory),
                       "--onnx", str(files[engine.split()[1]]), "--threads", str(threads), "--sentences",
                       str(sentence_file), "--passes", str(args.passes), "--batch-size", str(args.batch_size),
                       "--dump", dumps[(code, engine)]]
                seconds, out, _ = timed_process(cmd, code_env(codes[code], threads))
                runs[(code, engine)].append(dict(json.loads(out.strip().splitlines()[-1]), process_s=seconds))
        for code, engine in engines:
            got = runs[(code, engine)]
            passes = [s for r in got for s in r["pass_s"]]
            row = {"shape": shape, "threads": threads, "engine": engine, "code": code, "rounds": len(got),
                   "tokens_per_s": results["tokens"] / statistics.median(passes), "pass_s": passes,
                   **{key: statistics.median(r[key] for r in got) for key in ("process_s", "load_s", "peak_rss_mb")}}
            if engine.startswith("onnxruntime"):
                precision = engine.split()[1]
                row.update(onnx_mb=files[precision].stat().st_size / 1e6, export_s=export_s[precision])
            if (code, engine) != ("new", "ours fp32"):
                row.update(compare(dumps[("new", "ours fp32")], dumps[(code, engine)]))
            results["rows"].append(row)
            save_results(results, Path(args.out))
            print(json.dumps(row), flush=True)


def accuracy(shape: str, count: int, work: Path) -> list[dict]:
    """Per layer, the cosine of each int8 engine's token vectors to ours float32 on the first `count` lines
    of wiki_corpus test.txt, summarised as scripts/int8_accuracy.py does for ours (docs/performance.md)."""
    from elmo.formats.onnx_export import export_onnx
    from elmo.model.int8 import token_cosines

    directory = model_dir(shape, work)
    lines = (SENTENCES.parent / "test.txt").read_text(encoding="utf-8").splitlines()[:count]
    batches = sorted_batches(lines, 64)
    fp32 = ours(directory, False)
    export_onnx(load_embedder_bilm(directory), work / f"{shape}-accuracy-int8.onnx", int8=True)
    engines = {"ours int8": ours(directory, True),
               "onnxruntime int8": onnxruntime_engine(work / f"{shape}-accuracy-int8.onnx", torch.get_num_threads())}
    cosines: dict[str, list[np.ndarray]] = {name: [] for name in engines}
    for batch in batches:
        reference = fp32(batch)
        for name, embed in engines.items():
            cosines[name] += [token_cosines(a, b) for a, b in zip(reference, embed(batch))]
    rows = []
    for name, parts in cosines.items():
        cos = np.concatenate(parts, axis=1)
        rows += [{"shape": shape, "engine": name, "layer": k, "tokens": cos.shape[1], "mean": float(cos[k].mean()),
                  "min": float(cos[k].min()), "p0.1": float(np.percentile(cos[k], 0.1)),
                  "below_0.995": int((cos[k] < 0.995).sum())} for k in range(cos.shape[0])]
    return rows


def load_embedder_bilm(directory: Path):
    from elmo import load_bilm

    return load_bilm(directory / "options.json", directory / "weights.hdf5")


def markdown_table(results: dict) -> str:
    lines = ["| shape | threads | engine | tok/s (compute) | vs ours fp32 | whole process s | load s | peak RSS MB "
             "| ONNX file MB | to ours fp32: max diff / cosine mean / min |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    base = {(r["shape"], r["threads"]): r["tokens_per_s"] for r in results["rows"]
            if r["engine"] == "ours fp32" and r.get("code", "new") == "new"}
    for r in results["rows"]:
        engine = r["engine"] if r.get("code", "new") == "new" else f"{r['engine']} ({r['code']})"
        ratio = r["tokens_per_s"] / base[(r["shape"], r["threads"])]
        match = "-" if engine == "ours fp32" else (
            f"{r['max_abs_diff']:.1e} / {r['cosine_mean']:.5f} / {r['cosine_min']:.5f}")
        onnx_mb = f"{r['onnx_mb']:.1f}" if "onnx_mb" in r else "-"
        lines.append(f"| {r['shape']} | {r['threads']} | {engine} | {r['tokens_per_s']:,.0f} | x{ratio:.2f} | "
                     f"{r['process_s']:.1f} | {r['load_s']:.1f} | {r['peak_rss_mb']:,.0f} | {onnx_mb} | {match} |")
    return "\n".join(lines)


def accuracy_table(results: dict) -> str:
    lines = ["| shape | engine | layer | tokens | mean cosine | min cosine | 0.1th percentile | tokens < 0.995 |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['shape']} | {r['engine']} | {r['layer']} | {r['tokens']:,} | {r['mean']:.5f} | {r['min']:.5f} | "
              f"{r['p0.1']:.5f} | {r['below_0.995']} |" for r in results["accuracy"]]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode")
    w = sub.add_parser("worker")
    for flag in ("--engine", "--model-dir", "--onnx", "--sentences", "--dump"):
        w.add_argument(flag, required=True)
    for flag in ("--threads", "--passes", "--batch-size"):
        w.add_argument(flag, type=int, required=True)
    p.add_argument("--shapes", default="small,original", help=f"any of {', '.join(SHAPES)}")
    p.add_argument("--threads", default="1")
    p.add_argument("--sentences", type=int, default=128)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1, help="engines run this many times in turn; medians over all")
    p.add_argument("--before", action="append", default=[], help="an older code's src/ folder: its int8 beside ours")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--out", default=str(HERE / "results" / "onnx-speed-cpu.json"))
    p.add_argument("--render", metavar="JSON", help="measure nothing: print the table of a results file")
    p.add_argument("--accuracy", type=int, metavar="N",
                   help="no timing: per layer, each int8 engine's cosine to ours float32 on the first N lines of "
                   "wiki_corpus test.txt")
    args = p.parse_args()
    if args.mode == "worker":
        worker(args)
        return
    if args.render:
        results = json.loads(Path(args.render).read_text())
        print(accuracy_table(results) if "accuracy" in results else markdown_table(results))
        return
    if args.accuracy:
        work = Path(tempfile.mkdtemp(prefix="elmo-onnx-accuracy-"))
        rows = [row for shape in args.shapes.split(",") if shape for row in accuracy(shape, args.accuracy, work)]
        save_results({"command": " ".join(sys.argv), "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "sentences": args.accuracy, "accuracy": rows}, Path(args.out))
        print(accuracy_table({"accuracy": rows}))
        return
    if not SENTENCES.exists():
        sys.exit(f"needs {SENTENCES}")
    import onnxruntime

    work = Path(tempfile.mkdtemp(prefix="elmo-onnx-speed-"))
    os.environ["ELMO_CACHE"] = str(work / "cache")  # this run's int8 stores, made here and read by the workers
    sentence_file, lines = write_sentences(work, args.sentences)
    results = {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                           "torch": torch.__version__,
                           "onnxruntime": onnxruntime.__version__,
                           "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu": machine()},
               "codes": sorted({"new", *(Path(s).resolve().parent.name for s in args.before)}), "rounds": args.rounds,
               "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv),
               "sentences": len(lines), "tokens": sum(len(line.split()) for line in lines),
               "batch_size": args.batch_size, "passes": args.passes, "rows": []}
    threads = [int(t) for t in args.threads.split(",")]
    for shape in [s for s in args.shapes.split(",") if s]:
        if shape not in SHAPES:
            sys.exit(f"--shapes: expected any of {SHAPES}, found {shape!r}")
        measure_shape(shape, threads, args, work, sentence_file, results)
    print(markdown_table(results))


if __name__ == "__main__":
    main()
