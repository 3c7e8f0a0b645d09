"""CoNLL-2003 NER with spaCy's own pipeline (tok2vec + ner), with our ELMo in the embedding or without
(issue #64): train one config, choose on dev, score test, write a small JSON of the results.

    python scripts/spacy_ner.py train --config examples/spacy/ner-elmo.cfg --seed 1 \\
        --data ../runs/spacy-ner/data --work ../runs/spacy-ner/elmo-s1 --out benchmarks/results/spacy-ner/elmo-s1.json
    python scripts/spacy_ner.py speed --data ../runs/spacy-ner/data ../runs/spacy-ner/elmo-s1 ../runs/spacy-ner/static-s1

`train` runs spaCy's own training loop (`spacy.cli.train.train`, what `python -m spacy train` runs) on
DATA/eng.train.spacy with DATA/eng.testa.spacy as dev (spaCy keeps the best dev checkpoint as model-best), then
loads model-best and scores DATA/eng.testb.spacy with `nlp.evaluate`. Every evaluation spaCy makes during training
is appended to WORK/evals.jsonl as it happens (a run that dies keeps its log). `speed` measures words per second
of trained pipelines at inference (`nlp.pipe` over the test texts, ELMo's cache emptied before each pass: every
sentence is new to it, as in use), the median of --passes passes, the pipelines side by side in one process.
The .spacy files come from `python -m spacy convert` (docs/integrations.md has the commands).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SPLITS = {"train": "eng.train.spacy", "dev": "eng.testa.spacy", "test": "eng.testb.spacy"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one config and score it")
    t.add_argument("--config", type=Path, required=True)
    t.add_argument("--seed", type=int, required=True)
    t.add_argument("--data", type=Path, required=True, help="folder of eng.{train,testa,testb}.spacy")
    t.add_argument("--work", type=Path, required=True, help="spaCy's output folder (outside the repo)")
    t.add_argument("--out", type=Path, required=True, help="the result JSON")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a spaCy config override, e.g. training.max_epochs=1 (a sizing run; recorded in the JSON)")
    s = sub.add_parser("speed", help="inference words/s of trained runs")
    s.add_argument("runs", type=Path, nargs="+", help="WORK folders of `train` (model-best is loaded)")
    s.add_argument("--data", type=Path, required=True)
    s.add_argument("--passes", type=int, default=3)
    s.add_argument("--out", type=Path, default=None)
    m = sub.add_parser("report", help="the markdown rows of docs/results.md from the result JSONs")
    m.add_argument("results", type=Path, help="benchmarks/results/spacy-ner")
    r = sub.add_parser("reload", help="a trained run's model-best in a new process: identical predictions?")
    r.add_argument("run", type=Path)
    r.add_argument("--data", type=Path, required=True)
    r.add_argument("--out", type=Path, default=None)
    for q in (t, s, r, m):
        q.add_argument("--threads", type=int, default=1, help="torch threads (the biLM)")
    return p.parse_args(argv)


def eval_logger(path: Path):
    """A spaCy training logger (spaCy's logger protocol) that appends each evaluation to `path` as one JSON line."""

    def setup(nlp, stdout=sys.stdout, stderr=sys.stderr):
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.process_time()

        def log_step(info):
            if info is None or info.get("score") is None:
                return
            record = {key: info[key] for key in ("epoch", "step", "seconds", "words")}
            record["score"] = float(info["score"])
            record["cpu_seconds"] = round(time.process_time() - start, 1)
            record["scores"] = {k: float(v) for k, v in info["other_scores"].items() if k in ("ents_f", "ents_p", "ents_r")}
            record["losses"] = {k: round(float(v), 2) for k, v in info["losses"].items()}
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            stdout.write(json.dumps(record) + "\n")
            stdout.flush()

        return log_step, lambda: None

    return setup


def overrides(args: argparse.Namespace) -> dict:
    from spacy.util import registry

    found = {"paths.train": str(args.data / SPLITS["train"]), "paths.dev": str(args.data / SPLITS["dev"]),
             "system.seed": args.seed}
    for item in args.set:
        key, _, value = item.partition("=")
        found[key] = json.loads(value) if value[:1] in "0123456789-[{\"tf" else value
    # the configs' ConsoleLogger section keeps its `progress_bar` setting: the replacement takes it and ignores it
    registry.loggers.register("elmo_scripts.EvalLog.v1",
                              func=lambda progress_bar=False: eval_logger(args.work / "evals.jsonl"))
    found["training.logger.@loggers"] = "elmo_scripts.EvalLog.v1"
    return found


def train(args: argparse.Namespace) -> dict:
    from spacy.cli.train import train as spacy_train

    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "evals.jsonl").unlink(missing_ok=True)
    wall, cpu = time.perf_counter(), time.process_time()
    spacy_train(args.config, args.work, overrides=overrides(args))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    evals = [json.loads(line) for line in (args.work / "evals.jsonl").read_text().splitlines()]
    best = max(evals, key=lambda e: (e["score"], -e["step"]))
    return {"config": str(args.config), "config_sha256": hashlib.sha256(args.config.read_bytes()).hexdigest(),
            "seed": args.seed, "overrides": args.set, "train_wall_seconds": round(wall, 1),
            "train_cpu_seconds": round(cpu, 1), "epochs_started": evals[-1]["epoch"] + 1, "steps": evals[-1]["step"],
            "best_dev": best, "evaluations": len(evals), **score_test(args.work / "model-best", args.data)}


def score_test(model_dir: Path, data: Path) -> dict:
    """model-best loaded as a user would (spacy.load), its test scores by nlp.evaluate, its learned ELMo mix."""
    import spacy
    from spacy.training import Corpus

    from elmo.integrations.spacy_layers import layer_weights

    nlp = spacy.load(model_dir)
    found = {"layer_weights": layer_weights(nlp)}
    for split in ("test",):  # dev: spaCy's own evaluation of model-best during training (best_dev)
        examples = list(Corpus(data / SPLITS[split])(nlp))
        scores = nlp.evaluate(examples)
        found[split] = {"ents_f": scores["ents_f"], "ents_p": scores["ents_p"], "ents_r": scores["ents_r"],
                        "per_type": scores["ents_per_type"]}
    return found


def shown(path: Path) -> str:
    """A path as the results show it: relative to the checkout (../runs/...), never this machine's own."""
    return os.path.relpath(path.resolve(), REPO)


def elmo_runners(nlp) -> list:
    from elmo.integrations.spacy_layers import MIX_NAME

    return [node.attrs["elmo_runner"] for _, proc in nlp.pipeline if hasattr(proc, "model")
            for node in proc.model.walk() if node.name == MIX_NAME]


def speed(args: argparse.Namespace) -> dict:
    import spacy
    from spacy.training import Corpus

    pipelines = {shown(run): spacy.load(run / "model-best") for run in args.runs}
    texts = [eg.reference.text for eg in Corpus(args.data / SPLITS["test"])(spacy.blank("en"))]
    words = sum(len(t.split()) for t in texts)
    times: dict[str, list[float]] = {f"{name} {cache}": [] for name in pipelines for cache in ("cold", "warm")}
    for _ in range(args.passes):
        for name, nlp in pipelines.items():  # side by side: each pass runs every pipeline once, cold then warm
            for runner in elmo_runners(nlp):
                runner.clear()
            for cache in ("cold", "warm"):  # warm: every sentence already in ELMo's cache (a later epoch)
                start = time.perf_counter()
                for _doc in nlp.pipe(texts, batch_size=256):
                    pass
                times[f"{name} {cache}"].append(time.perf_counter() - start)
    return {"words": words, "docs": len(texts), "passes": args.passes,
            "words_per_second": {name: round(words / statistics.median(t), 1) for name, t in times.items()},
            "seconds": {name: [round(x, 2) for x in t] for name, t in times.items()}}


PREDICT = """
import json, sys, spacy
from spacy.training import Corpus
nlp = spacy.load(sys.argv[1])
examples = list(Corpus(sys.argv[2])(nlp))
docs = list(nlp.pipe([eg.reference.text for eg in examples], batch_size=256))
from elmo.integrations.spacy_layers import layer_weights
print(json.dumps({"ents": [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in docs],
                  "ents_f": nlp.evaluate(examples)["ents_f"], "layer_weights": layer_weights(nlp)}))
"""


def reload(args: argparse.Namespace) -> dict:
    """model-best's test predictions, evaluation and learned weights here and in two new processes (spacy.load)."""
    import subprocess

    found = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", PREDICT, str(args.run / "model-best"),
                               str(args.data / SPLITS["test"])], capture_output=True, text=True, check=True)
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"run": shown(args.run), "identical": found[0] == found[1], "docs": len(found[0]["ents"]),
            "entities": sum(map(len, found[0]["ents"])), "ents_f": found[0]["ents_f"],
            "layer_weights": found[0]["layer_weights"]}


def mean_sd(values: list[float]) -> str:
    if not values:
        return "not run"
    sd = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else " (1 seed)"
    return f"{statistics.mean(values):.2f}{sd}"


def report(args: argparse.Namespace) -> str:
    return results_row(args.results)


def results_row(folder: Path) -> str:
    """The spaCy row beside our tagger's and flair's (docs/results.md), and the learned mix, from
    FOLDER/ARM-sSEED.json (a renderer of results.md can call this)."""
    runs = {arm: [json.loads(p.read_text()) for p in sorted(folder.glob(f"{arm}-s*.json"))]
            for arm in ("static", "elmo")}
    test = {arm: [100 * r["test"]["ents_f"] for r in runs[arm]] for arm in runs}
    dev = {arm: [100 * r["best_dev"]["score"] for r in runs[arm]] for arm in runs}
    minutes = {arm: statistics.mean([r["train_wall_seconds"] / 60 for r in runs[arm]]) for arm in runs if runs[arm]}
    gain = ""
    if test["static"] and test["elmo"]:
        static_err, elmo_err = (100 - statistics.mean(test[arm]) for arm in ("static", "elmo"))
        gain = f"{100 * (static_err - elmo_err) / static_err:.1f}%"
    weights = [r["layer_weights"]["tok2vec"] for r in runs["elmo"]]
    mix = " / ".join(f"{statistics.mean(w['weights'][k] for w in weights):.2f}" for k in range(3)) if weights else ""
    gamma = f"{statistics.mean(w['gamma'] for w in weights):.2f}" if weights else ""
    seeds = sorted({r["seed"] for arm in runs.values() for r in arm})
    epochs = "/".join(str(e) for e in sorted({r["epochs_started"] for arm in runs.values() for r in arm}))
    return (f"| spaCy {runs['elmo'][0]['machine']['spacy'] if runs['elmo'] else ''} tok2vec + ner "
            f"({epochs} epochs, {' / '.join(f'{minutes[a]:.0f}' for a in ('static', 'elmo') if a in minutes)} min a run, "
            f"seeds {', '.join(map(str, seeds))}) | {mean_sd(test['static'])} | {mean_sd(test['elmo'])} | {gain} | "
            f"{statistics.mean(dev['static']):.2f} / {statistics.mean(dev['elmo']):.2f} |\n\n"
            f"Learned mix (softmax weights, token layer first; mean over seeds): {mix}, gamma {gamma}.\n")


def machine() -> dict:
    import spacy
    import torch

    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_name(), "affinity": sorted(os.sched_getaffinity(0)), "torch_threads": torch.get_num_threads(),
            "spacy": spacy.__version__, "torch": torch.__version__, "python": platform.python_version()}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else ():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.command == "report":
        sys.stdout.write(report(args))
        return 0
    result = {"train": train, "speed": speed, "reload": reload}[args.command](args)
    result["machine"] = machine()
    text = json.dumps(result, indent=1) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
