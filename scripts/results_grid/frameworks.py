"""The NER row of Table 1 through other frameworks: flair's SequenceTagger, with the same static vectors,
and spaCy's own NER pipeline, each beside our own tagger."""

from __future__ import annotations

import json
import statistics

from .arms import DOCS_EXAMPLE_SKIP
from .grid import Grid
from .notebook import FLAIR_CONDITIONS, SPACY_CONDITIONS
from .stats import error_reduction, mean_std, reduction, scores

FLAIR_COMMAND = ("python scripts/flair_ner.py --arm {arm} --seed 1 --epochs 15 --threads 1 "
                 "--out benchmarks/results/flair-ner/{arm}-s1.json")
FLAIR_RESCORE = ("python scripts/flair_ner.py --arm elmo --rescore --threads 1 "
                 "--out benchmarks/results/flair-ner/elmo-s1.json   # the saved tagger scored again (see above)")


def flair_runs(grid: Grid) -> dict[str, list[dict]]:
    """benchmarks/results/flair-ner/{static,elmo}-sN.json, as scripts/flair_ner.py wrote them."""
    folder = grid.ner_arms.parent / "flair-ner"
    return {arm: [json.loads(p.read_text()) for p in sorted(folder.glob(f"{arm}-s*.json"))] for arm in ("static", "elmo")}


def flair_row(runs: dict[str, list[dict]]) -> str:
    static, elmo = ([r["test_f1"] for r in runs[arm]] for arm in ("static", "elmo"))
    dev = " / ".join(f"{statistics.mean([r['dev_f1'] for r in runs[arm]]):.2f}" if runs[arm] else "not run"
                     for arm in ("static", "elmo"))
    gain = f"{error_reduction(statistics.mean(static), statistics.mean(elmo)):.1f}%" if static and elmo else ""
    epochs = sorted({r["epochs"] for arm in runs.values() for r in arm})
    minutes = [f"{sum(r['epoch_seconds']) / 60:.0f}" for arm in ("static", "elmo") for r in runs[arm]]
    return (f"| flair {runs['elmo'][0]['flair'] if runs['elmo'] else ''} SequenceTagger (BiLSTM-CRF, "
            f"{'/'.join(map(str, epochs))} epochs, {' / '.join(minutes)} min) | {mean_std(static) or 'not run'} | "
            f"{mean_std(elmo) or 'not run'} | {gain} | {dev} |")


def ours_row(grid: Grid, metrics: dict) -> str:
    """Our tagger's NER row (Table 1), for the tables that set another framework beside it."""
    ours_static, ours_elmo = (scores(grid, metrics, "ner", arm, 1.0) for arm in ("static", "elmo"))
    ours_dev = " / ".join(f"{statistics.mean(v):.2f}" if v else "" for v in
                          (scores(grid, metrics, "ner", arm, 1.0, "dev") for arm in ("static", "elmo")))
    return (f"| ours (Table 1, {len(grid.seeds)} seeds) | {mean_std(ours_static)} | {mean_std(ours_elmo)} | "
            f"{reduction(ours_static, ours_elmo)} | {ours_dev} |")


def flair_section(grid: Grid, metrics: dict) -> list[str]:
    """flair's tagger with `elmo.integrations.flair.ELMoEmbeddings` stacked on the static vectors, and without it."""
    runs = flair_runs(grid)
    lines = ["## NER through flair: our ELMo in flair's SequenceTagger", "",
             "The same CoNLL-2003 splits and the same frozen word2vec vectors (loaded into flair's WordEmbeddings), with",
             "and without the bundled model through `elmo.integrations.flair.ELMoEmbeddings(\"default\", "
             "embedding_mode=\"all\")`;", "flair's own recipe (SGD lr 0.1 annealed on dev F1, batch 32, hidden 256, "
             "CRF), the best dev epoch's model scored. Span F1 (test), mean ± sd over seeds.", "",
             "| tagger | static | +ELMo | rel. error reduction | dev F1 static / +ELMo |", "|---|---:|---:|---:|---:|",
             ours_row(grid, metrics)]
    lines += [flair_row(runs) if any(runs.values()) else "| flair SequenceTagger | not run | not run | | |", "",
              *FLAIR_CONDITIONS, "", DOCS_EXAMPLE_SKIP, "```bash", *(FLAIR_COMMAND.format(arm=arm) for arm in ("static", "elmo")), FLAIR_RESCORE, "```", ""]
    return lines


def spacy_section(grid: Grid, metrics: dict) -> list[str]:
    """spaCy's NER pipeline with `elmo.ELMoEmbed.v1` (the learned mix beside MultiHashEmbed), and without it;
    the row from scripts/spacy_ner.py's result files."""
    from spacy_ner import results_row  # scripts/spacy_ner.py, beside this package

    folder = grid.ner_arms.parent / "spacy-ner"
    row = results_row(folder).rstrip("\n").split("\n") if any(folder.glob("*-s*.json")) else [
        "| spaCy tok2vec + ner | not run | not run | | |"]
    return ["## NER through spaCy: `elmo.ELMoEmbed.v1` in spaCy's own pipeline", "",
            "spaCy's default CPU NER pipeline (`spacy init config -p ner -o efficiency`: tok2vec with MultiHashEmbed and a",
            "MaxoutWindowEncoder, the transition-based NER), with the bundled model's learned scalar mix concatenated with",
            "MultiHashEmbed (`examples/spacy/ner-elmo.cfg`) and without it (`examples/spacy/ner-static.cfg`); no static word",
            "vectors in either arm. 3 epochs each (the six runs had to fit in about two hours of one core:",
            "docs/integrations.md says why), model-best chosen on testa, testb scored with `nlp.evaluate`. Span F1 (test), mean",
            "± sd over seeds.", "",
            "| tagger | static | +ELMo | rel. error reduction | dev F1 static / +ELMo |", "|---|---:|---:|---:|---:|",
            ours_row(grid, metrics), *row, "", *SPACY_CONDITIONS, "",
            "<!-- example: skip a measurement (CPU-hours) -->", "```bash",
            "scripts/spacy_ner_runs.sh ../runs/spacy-ner    # data/ from `spacy convert` (docs/integrations.md); "
            "the six runs in turn",
            "python scripts/spacy_ner.py report benchmarks/results/spacy-ner   # the spaCy row above", "```", ""]
