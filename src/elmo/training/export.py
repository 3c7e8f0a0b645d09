"""`elmo export RUN_DIR -o MODEL_DIR`: a training run's checkpoint -> the original model files.

MODEL_DIR gets options.json for prediction (only `lstm` and `char_cnn`, `n_characters` 262, as the
released files), weights.hdf5 exactly as bilm-tf's `dump_weights` writes it (docs/format.md 3.4: 261-row
char table, no softmax), softmax.hdf5 (W, b) for perplexity, vocab.txt, and model-card.txt: one line
saying what the model started from and on what text it was trained (no loader reads it).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch

from elmo.errors import InputError
from elmo.files.fileio import atomic_dir
from elmo.files.layout import CHECKPOINT_DIR, OPTIONS_NAME, RUN_FILE, SOFTMAX_NAME, VOCAB_NAME, WEIGHTS_NAME, ModelFiles
from elmo.files.output_paths import check_not_input
from elmo.formats.lm_vocab import Vocab, write_vocab
from elmo.formats.weights import save_bilm
from elmo.model.bilm import BiLM
from elmo.model.chars import N_CODES
from elmo.model.options import BiLMConfig, read_options
from elmo.training.settings import read_run_file
from elmo.training.softmax import Softmax, save_softmax

from .checkpoint import latest_checkpoint, load_checkpoint, load_into
from .model import LanguageModel


def inference_options(options: dict) -> dict:
    """The prediction-time options.json: the architecture only, with the 262-row char table."""
    out = {"lstm": copy.deepcopy(options["lstm"]), "char_cnn": copy.deepcopy(options["char_cnn"])}
    out["char_cnn"]["n_characters"] = N_CODES + 1
    return out


MODEL_CARD_NAME = "model-card.txt"


def load_run(run_dir: str | os.PathLike, checkpoint: str | os.PathLike | None = None) -> tuple[LanguageModel, Vocab, Path]:
    """The LM of a run directory at its latest (or the given) checkpoint, in eval mode."""
    model, vocab, path, _ = _load_run(run_dir, checkpoint)
    return model, vocab, path


def _load_run(run_dir: str | os.PathLike, checkpoint: str | os.PathLike | None) -> tuple[LanguageModel, Vocab, Path, dict]:
    run = Path(run_dir)
    if not (run / OPTIONS_NAME).is_file() or not (run / VOCAB_NAME).is_file():
        raise InputError(f"{run}: not a training run directory ({OPTIONS_NAME} and {VOCAB_NAME} expected)")
    path = Path(checkpoint) if checkpoint is not None else latest_checkpoint(run)
    if path is None:
        raise InputError(f"{run}: no checkpoint yet in {run / CHECKPOINT_DIR}")
    config = BiLMConfig.from_options(inference_options(read_options(run / OPTIONS_NAME).raw), source=str(run / OPTIONS_NAME))
    vocab = Vocab.load(run / VOCAB_NAME)
    model = LanguageModel(config, len(vocab), bilm=BiLM(config, char_rows=N_CODES))
    state = load_checkpoint(path)
    load_into(model, state["model"], path)
    return model.eval(), vocab, path, state


def export_run(run_dir: str | os.PathLike, model_dir: str | os.PathLike, checkpoint: str | os.PathLike | None = None,
               softmax_float16: bool = False, overwrite: bool = False, float16: bool = False,
               clip_float16: bool = False) -> ModelFiles:
    """A run's checkpoint as a model directory; `float16` stores every weight (softmax too) as float16.

    The directory is written whole under a temporary name and renamed, so a failed export (even with
    --overwrite) leaves MODEL_DIR as it was."""
    check_not_input(model_dir, {"RUN_DIR": run_dir, "--checkpoint": checkpoint}, flag="MODEL_DIR", folder=True)
    model, vocab, _, state = _load_run(run_dir, checkpoint)
    out = Path(model_dir)
    out.parent.mkdir(parents=True, exist_ok=True)  # `-o models/x` as save_bilm: the folders above are made
    names = (OPTIONS_NAME, WEIGHTS_NAME, SOFTMAX_NAME, VOCAB_NAME, MODEL_CARD_NAME)
    present = [n for n in names[:4] if (out / n).exists()]
    if present and not overwrite:
        raise InputError(f"{out}: already holds {', '.join(present)}; pass --overwrite to replace them")
    _fit_float16(model, float16, softmax_float16 or float16, clip_float16)
    with torch.no_grad(), atomic_dir(out, replace=names) as tmp:
        save_bilm(model.bilm, Path(tmp) / OPTIONS_NAME, Path(tmp) / WEIGHTS_NAME, float16=float16)
        save_softmax(model.softmax, Path(tmp) / SOFTMAX_NAME, float16=softmax_float16 or float16)
        write_vocab(vocab.tokens, Path(tmp) / VOCAB_NAME)
        card = model_card_line(Path(run_dir), state["step"], state["tokens"])
        (Path(tmp) / MODEL_CARD_NAME).write_text(card + "\n", encoding="utf-8")
    return ModelFiles.from_dir(out)


def model_card_line(run_dir: Path, step: int, tokens: int) -> str:
    """What the model started from and on what text it was trained, from the run's run.json."""
    run = read_run_file(run_dir / RUN_FILE) if (run_dir / RUN_FILE).is_file() else {}
    return model_card(run, step, tokens)


FLOAT16_MAX = 65504.0  # float16's largest finite value; anything beyond becomes inf


@torch.no_grad()
def _fit_float16(model: LanguageModel, bilm: bool, softmax: bool, clip: bool) -> None:
    """Weights stored as float16 must fit it: refused, or with `clip` clamped to +-65504, never inf."""
    chosen = [(f"bilm.{n}", p) for n, p in model.bilm.named_parameters()] if bilm else []
    chosen += [("softmax.W", model.softmax.W)] if softmax else []
    for name, param in chosen:
        largest = float(param.abs().max()) if param.numel() else 0.0
        if largest > FLOAT16_MAX:
            if not clip:
                raise InputError(f"weight '{name}' reaches {largest:.6g}, beyond float16's largest value 65504: as "
                                 "float16 it would be stored as infinity. Drop --float16/--softmax-float16, or pass "
                                 "--clip-float16 to clip such values to +-65504")
            param.clamp_(-FLOAT16_MAX, FLOAT16_MAX)


def load_model_dir(files: ModelFiles, vocab_file: str | os.PathLike | None = None) -> tuple[LanguageModel, Vocab]:
    """A MODEL_DIR's biLM with its softmax, for scoring text."""
    from elmo.formats.weights import load_bilm

    from .softmax import load_softmax

    if files.softmax_file is None:
        raise InputError(f"{files.options_file.parent}: no {SOFTMAX_NAME}; perplexity needs the softmax weights, which "
                         "weights.hdf5 never holds (`elmo export` writes them)")
    vocab_path = vocab_file or files.vocab_file
    if vocab_path is None:
        raise InputError(f"{files.options_file.parent}: no {VOCAB_NAME}; give --vocab (the vocabulary the model was "
                         f"trained with, one word per softmax row)")
    vocab = Vocab.load(vocab_path)
    bilm = load_bilm(files.options_file, files.weight_file)
    softmax: Softmax = load_softmax(files.softmax_file, len(vocab), bilm.config.projection_dim)
    return LanguageModel(bilm.config, len(vocab), bilm=bilm, softmax=softmax).eval(), vocab


def model_card(run: dict, step: int, tokens: int) -> str:
    """One line saying what a model started from and on what text it was tuned (run.json's values)."""
    train = ", ".join(Path(p).name for p in run.get("train", []))
    tune = run.get("finetune")
    if not tune:
        return f"Trained from scratch on {train}: {step:,} steps, {tokens:,} tokens per direction."
    phase = f", the first {tune['softmax_steps']:,} of them the softmax alone" if tune.get("softmax_steps") else ""
    return (f"Fine-tuned from {tune['from']} ({tune['kind']}) on {train}: {step:,} steps{phase}, {tokens:,} tokens per "
            f"direction, {tune['optimizer']} lr {tune['lr']:g}.")
