"""Measure the bundled default model and write its model card's numbers.

    python scripts/evaluate_default_model.py --run RUN_DIR [--model default]

Computes full-softmax forward / backward / average perplexity, every sentence from zero state (as
the stateless embedder runs the model), on
wiki_corpus valid.txt and test.txt, on the first SLICE_LINES lines of test.txt (the figure
tests/test_default_model.py recomputes in CI), and the per-layer sense margins of
`elmo.tasks.contextuality` on SemCor; reads the training provenance (steps, tokens seen, wall time)
from RUN_DIR; writes docs/model-card.json, from which docs/model-card.md's tables are rendered.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
WIKI = SHARED / "wiki_corpus"
SEMCOR = SHARED / "wsd_raganato" / "Training_Corpora" / "SemCor"
SLICE_LINES = 300
CARD_JSON = REPO / "docs" / "model-card.json"
CARD_MD = REPO / "docs" / "model-card.md"
BEGIN, END = "<!-- measured: begin -->", "<!-- measured: end -->"


def slice_file(lines: int) -> Path:
    """The first `lines` lines of test.txt, as a temporary file (the CI check's input)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="elmo-card-")) / f"test-first-{lines}.txt"
    with open(WIKI / "test.txt", encoding="utf-8") as f:
        path.write_text("".join(next(f) for _ in range(lines)), encoding="utf-8")
    return path


def provenance(run_dir: Path) -> dict:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = records[-1]
    return {"steps": last["step"], "tokens_seen_per_direction": last["tokens"],
            "wall_time_hours": round(last["elapsed_s"] / 3600, 2), "final_train_ppl": round(last["ppl"], 1),
            "run_settings": relative_paths(json.loads((run_dir / "run.json").read_text()))}


def stored_dtypes(model_dir: Path) -> dict:
    """The dtypes each HDF5 file stores its weights in (float16 keeps the package within its budget;
    `load_bilm` gives float32 either way), so the card says what is on disk."""
    return {path.name: hdf5_dtypes(path) for path in sorted(model_dir.glob("*.hdf5"))}


def hdf5_dtypes(path: Path) -> list[str]:
    import h5py

    kinds: set[str] = set()

    def note(_: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            kinds.add(str(obj.dtype))

    with h5py.File(path, "r") as f:
        f.visititems(note)
    return sorted(kinds)


def relative_paths(run: dict) -> dict:
    """Corpus paths relative to the repository, so the card holds nothing machine-specific."""
    run["train"] = [os.path.relpath(os.path.normpath(path), REPO) for path in run.get("train", [])]
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default")
    p.add_argument("--run", required=True, type=Path, help="the training run directory the model was exported from")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from elmo import Embedder
    from elmo.models import resolve
    from elmo.tasks.contextuality import sense_margins, sense_occurrences
    from elmo.training.perplexity import load_for_scoring, perplexity

    card: dict = {"model": args.model, "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                                     text=True, cwd=REPO).stdout.strip()}
    files = resolve(args.model).original_files()
    card["size_mb"] = {f.name: round(f.stat().st_size / 1e6, 2) for f in sorted(files.options_file.parent.iterdir())}
    card["stored_dtypes"] = stored_dtypes(files.options_file.parent)
    card["options"] = json.loads(files.options_file.read_text())
    card["training"] = provenance(args.run)
    lm, vocab = load_for_scoring(args.model)
    card["vocab_size"] = len(vocab)
    card["perplexity"] = {}
    for name, path in (("valid", WIKI / "valid.txt"), ("test", WIKI / "test.txt"),
                       (f"test_first_{SLICE_LINES}_lines", slice_file(SLICE_LINES))):
        start = time.time()
        result = perplexity(lm, vocab, str(path), mode="sentence")
        result["seconds"] = round(time.time() - start, 1)
        card["perplexity"][name] = result
        print(name, result, flush=True)
    occurrences = sense_occurrences(str(SEMCOR / "semcor.data.xml.gz"), str(SEMCOR / "semcor.gold.key.txt.gz"))
    card["contextuality"] = sense_margins(Embedder.from_model(args.model), occurrences)
    CARD_JSON.write_text(json.dumps(card, indent=1) + "\n")
    render_card(json.loads(CARD_JSON.read_text()))
    print(f"wrote {CARD_JSON} and the measured section of {CARD_MD}", file=sys.stderr)


def render_card(card: dict) -> None:
    """Rewrite the part of docs/model-card.md between the markers from the JSON (numbers never retyped)."""
    t, ppl, ctx = card["training"], card["perplexity"], card["contextuality"]
    lines = [BEGIN, "",
             f"Measured by `python scripts/evaluate_default_model.py --run RUN_DIR` at commit `{card['git_commit'][:10]}`.", "",
             "| | value |", "| --- | --- |",
             f"| updates | {t['steps']:,} |",
             f"| tokens seen (per direction) | {t['tokens_seen_per_direction']:,} |",
             f"| training wall time | {t['wall_time_hours']} h |",
             f"| vocabulary (softmax) | {card['vocab_size']:,} |",
             f"| files | {', '.join(f'{k} {v} MB' for k, v in card['size_mb'].items())} |"]
    if "stored_dtypes" in card:
        stored = ", ".join(f"{name} {'/'.join(kinds)}" for name, kinds in card["stored_dtypes"].items())
        lines.append(f"| weights stored as | {stored} (loaded as float32) |")
    lines += ["",
             "Full-softmax perplexity (every sentence from zero state, as the embedder runs it):", "",
             "| split | tokens | forward | backward | average |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in ppl.items():
        lines.append(f"| {name.replace('_', ' ')} | {r['tokens']:,} | {r['forward']:.1f} | {r['backward']:.1f} | {r['average']:.1f} |")
    lines += ["", f"Sense separation on SemCor ({ctx['words']} ambiguous words, the two most frequent senses each; "
              "margin = mean cosine similarity of same-sense pairs minus that of different-sense pairs):", "",
              "| layer | mean margin | words with a positive margin |", "| --- | ---: | ---: |"]
    for layer, r in ctx["layers"].items():
        lines.append(f"| {layer} | {r['mean_margin']:+.4f} | {r['positive']} of {ctx['words']} |")
    lines += ["", "Per word (layer 1 / layer 2): " + ", ".join(
        f"{w} {ctx['layers']['1']['per_word'][w]:+.3f} / {ctx['layers']['2']['per_word'][w]:+.3f}"
        for w in ctx["layers"]["1"]["per_word"]), "", END]
    text = CARD_MD.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    CARD_MD.write_text(text[:start] + "\n".join(lines) + text[end:], encoding="utf-8")


if __name__ == "__main__":
    main()
