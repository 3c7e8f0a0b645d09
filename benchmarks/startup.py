"""Start-up, measured on old and new code side by side (issue #62).

    python benchmarks/startup.py --before OLD/src [--before OLD2/src ...] --pairs 5 \\
        --out benchmarks/results/startup-cpu.json
    python benchmarks/startup.py --render benchmarks/results/startup-cpu.json

Two measurements, each in fresh processes, the codes taking turns (old, new, old, new, ...) so that a
change of machine load hits both alike; medians over --pairs turns:
- `stages`: one process per code and shape that imports elmo, loads a model (`Embedder.from_files`) and
  embeds one sentence, timing each stage and counting the modules imported and whether torch._dynamo
  was among them; the bundled model and random weights at the `original` shapes; 1 thread. With
  `--precisions fp32,int8` also the int8 load (`int8=True`), its store written once before timing.
- `embed`: the whole `elmo embed` process on the first 400 sentences of the Wikipedia validation text at
  the `small` shapes (random weights, --all, batch 64, 2 threads): wall time from the process's start to
  its exit, and its peak RSS.
A code is a src/ folder (`git archive <commit> src | tar -x -C DIR` makes one); "new" is this checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import (
    PEAK_RSS_MB,
    REPO,
    code_env,
    embed_process,
    machine,
    random_model,
    save_results,
    timed_process,
    write_sentences,
)

STAGES = """
import json, sys, time
t0 = time.perf_counter()
import elmo
t1 = time.perf_counter()
from elmo import Embedder
embedder = Embedder.from_files(sys.argv[1], sys.argv[2], int8=sys.argv[3] == "int8")
t2 = time.perf_counter()
embedder.embed_sentence("The bank by the river is steep .".split())
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_sentence_s": t3 - t2, "modules": len(sys.modules),
                  "dynamo": "torch._dynamo" in sys.modules, "elmo": elmo.__file__,
                  "peak_rss_mb": PEAK}))
""".replace("PEAK", PEAK_RSS_MB)
def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def stages(codes: dict[str, str], models: dict[str, tuple[Path, Path]], pairs: int,
           precisions: list[str]) -> list[dict]:
    rows = []
    for shape, (options, weights) in models.items():
        if "int8" in precisions:  # the int8 store, written once before timing: every later load reads it
            from elmo import load_bilm
            load_bilm(options, weights, int8=True)
        runs: dict[tuple[str, str], list[dict]] = {(label, p): [] for p in precisions for label in codes}
        for _ in range(pairs):
            for label, precision in runs:
                cmd = [sys.executable, "-c", STAGES, str(options), str(weights), precision]
                wall, out, _ = timed_process(cmd, code_env(codes[label], 1))
                runs[(label, precision)].append(dict(json.loads(out.strip().splitlines()[-1]), process_s=wall))
        for (label, precision), got in runs.items():
            row = {"shape": shape, "code": label, "precision": precision, "passes": len(got),
                   "dynamo": got[0]["dynamo"], "modules": got[0]["modules"]}
            row.update({key: _median(got, key) for key in ("import_s", "load_s", "first_sentence_s", "process_s",
                                                             "peak_rss_mb")})
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def embed(codes: dict[str, str], model: tuple[Path, Path], sentences: Path, pairs: int, work: Path) -> list[dict]:
    runs: dict[str, list[dict]] = {label: [] for label in codes}
    for _ in range(pairs):
        for label, src in codes.items():
            flags = ["--options", str(model[0]), "--weights", str(model[1]), "--all", "--batch-size", "64"]
            runs[label].append(embed_process(src, sentences, work / f"out-{label}.hdf5", flags, threads=2))
    rows = []
    for label, got in runs.items():
        row = {"code": label, "passes": len(got), "process_s": _median(got, "process_s"),
               "fastest_s": min(r["process_s"] for r in got), "peak_rss_mb": _median(got, "peak_rss_mb"),
               "all_s": [round(r["process_s"], 3) for r in got]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def render(path: Path) -> None:
    r = json.loads(path.read_text())
    print(f"{r['machine']}; {r['date']}; torch {r['torch']}; {r['pairs']} turns per code, medians\n")
    print("| shape | code | precision | import s | load s | first sentence s | process s | peak RSS MB | modules "
          "| torch._dynamo |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    for s in r["stages"]:
        print(f"| {s['shape']} | {s['code']} | {s.get('precision', 'fp32')} | {s['import_s']:.2f} | "
              f"{s['load_s']:.2f} | "
              f"{s['first_sentence_s']:.3f} | "
              f"{s['process_s']:.2f} | {s['peak_rss_mb']:.0f} | {s['modules']} | {'yes' if s['dynamo'] else 'no'} |")
    if "embed" not in r:  # a stages-only run (--only stages)
        return
    new = next(e for e in r["embed"] if e["code"] == "new")
    print("\n| `elmo embed`, 400 sentences, small shapes, 2 threads | process s, median | fastest | each turn | "
          "peak RSS MB | new / this: time (median), RSS |")
    print("|---|---:|---:|---|---:|---:|")
    for e in r["embed"]:
        print(f"| {e['code']} | {e['process_s']:.2f} | {e.get('fastest_s', min(e['all_s'])):.2f} | {', '.join(f'{x:.1f}' for x in e['all_s'])} | "
              f"{e['peak_rss_mb']:.0f} | {new['process_s'] / e['process_s']:.2f}, {new['peak_rss_mb'] / e['peak_rss_mb']:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", action="append", default=[], help="an older code's src/ folder (repeatable)")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--out", type=Path)
    p.add_argument("--render", type=Path, help="print a results file as markdown tables")
    p.add_argument("--only", choices=["stages", "embed"], help="measure one of the two (the other is kept from --out)")
    p.add_argument("--precisions", default="fp32", help="stages: fp32, int8 or both (fp32,int8)")
    args = p.parse_args()
    if args.render:
        return render(args.render)
    codes = {Path(src).resolve().parent.name: str(Path(src).resolve()) for src in args.before}
    codes["new"] = str(REPO / "src")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["ELMO_CACHE"] = str(work / "cache")  # this run's int8 stores
        from elmo.models import resolve

        bundled = resolve("default").original_files()
        models = {"bundled": (bundled.options_file, bundled.weight_file),
                  "original": random_model("original", work / "original")}
        sentences, _ = write_sentences(work, 400)
        results = {"machine": machine(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": __import__("torch").__version__,
                   "pairs": args.pairs, "codes": sorted(codes)}  # labels: a src/ folder's path is this machine's
        if args.only and args.out and args.out.exists():  # keep the other measurement, with its own date
            kept = json.loads(args.out.read_text())
            results = {**kept, "codes": sorted(codes), "pairs": args.pairs,
                       f"{args.only}_date": results["date"], "date": kept["date"]}
        if args.only != "embed":
            results["stages"] = stages(codes, models, args.pairs, args.precisions.split(","))
        if args.only != "stages":
            results["embed"] = embed(codes, random_model("small", work / "small"), sentences, args.pairs, work)
    if args.out:
        save_results(results, args.out)


if __name__ == "__main__":
    main()
