"""Embedding speed with document context against sentence context, measured in one run.

    python benchmarks/document_speed.py [--model default] [--threads 1,2] [--passes 5] \
        [--out benchmarks/results/document-speed-cpu.json]

The same text both ways: CoNLL-2003's test split (eng.testb, 231 documents, 3,453 sentences), once
as sentences (`Embedder.embed_sentences`, every sentence from zero state) and once as documents
(`Embedder.embed_documents`, each document read whole in both directions). Times are medians of
--passes passes after a warm-up, each thread count in a fresh process; the fraction of the machine
is the model's forward FLOPs per token times tokens/s over a measured float32 GEMM (speed.py's
`gemm_flops`, the practical limit). See docs/documents.md, "Cost".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = Path(os.environ.get("ELMO_SHARED", REPO.parent / "shared"))
TEST = SHARED / "data" / "conll2003" / "eng.testb.gz"


def documents_of(path: Path) -> list[list[list[str]]]:
    from elmo.tasks.readers import read_conll2003

    documents: dict[int, list[list[str]]] = {}
    for example in read_conll2003(path):
        documents.setdefault(example.document, []).append(example.tokens)
    return list(documents.values())


def measure(model: str, threads: int, passes: int, sentence_batch: int, document_batch: int) -> dict:
    """One thread count, in this process: tokens/s of both contexts, interleaved pass by pass."""
    import torch
    from benchlib import gemm_flops

    from elmo import Embedder
    from elmo.model.options import read_options
    from elmo.models import resolve

    torch.set_num_threads(threads)
    resolved = resolve(model)
    embedder = Embedder(resolved.load())
    documents = documents_of(TEST)
    sentences = [s for d in documents for s in d]
    tokens = sum(map(len, sentences))
    runs = {"sentence": lambda: embedder.embed_sentences(sentences, batch_size=sentence_batch),
            "document": lambda: embedder.embed_documents(documents, batch_size=document_batch)}
    times: dict[str, list[float]] = {mode: [] for mode in runs}
    for index in range(passes + 1):  # the first pass warms up
        for mode, run in runs.items():
            start = time.perf_counter()
            for _ in run():
                pass
            if index:
                times[mode].append(time.perf_counter() - start)
    limit = gemm_flops(threads)
    flops = read_options(resolved.original_files().options_file).forward_flops_per_token
    result = {"threads": threads, "documents": len(documents), "sentences": len(sentences), "tokens": tokens,
              "gemm_flops": limit}
    for mode, seconds in times.items():
        rate = tokens / statistics.median(seconds)
        result[mode] = {"seconds": seconds, "tokens_per_s": rate, "fraction_of_gemm": rate * flops / limit}
    result["document_over_sentence"] = result["document"]["tokens_per_s"] / result["sentence"]["tokens_per_s"]
    return result


def table(results: list[dict]) -> list[str]:
    lines = ["| threads | sentence context tok/s | document context tok/s | document / sentence | "
             "fraction of GEMM (sentence / document) |", "|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['threads']} | {r['sentence']['tokens_per_s']:,.0f} | {r['document']['tokens_per_s']:,.0f} | "
                     f"x{r['document_over_sentence']:.2f} | {r['sentence']['fraction_of_gemm']:.1%} / "
                     f"{r['document']['fraction_of_gemm']:.1%} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--sentence-batch", type=int, default=64, help="sentences per batch (elmo embed's default)")
    p.add_argument("--document-batch", type=int, default=8, help="documents per batch")
    p.add_argument("--out", default=str(HERE / "results" / "document-speed-cpu.json"))
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one thread count, print JSON
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.model, args.one, args.passes, args.sentence_batch, args.document_batch)))
        return 0
    if not TEST.is_file():
        raise SystemExit(f"needs {TEST} (the project's shared data beside the checkout, or ELMO_SHARED)")
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        command = [sys.executable, __file__, "--one", str(threads), "--model", args.model, "--passes", str(args.passes),
                   "--sentence-batch", str(args.sentence_batch), "--document-batch", str(args.document_batch)]
        results.append(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout))
        print("\n".join(table(results[-1:])[2:]), flush=True)
    import torch

    report = {"machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                          "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()},
              "model": args.model,
              "passes": args.passes, "sentence_batch": args.sentence_batch, "document_batch": args.document_batch,
              "command": "python benchmarks/document_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "results": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(out)
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
