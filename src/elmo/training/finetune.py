"""`elmo train --init-from REF`: start from any model `elmo.models.resolve` knows, on new text.

A model with a softmax continues with it, its rows carried over by word into the run's vocabulary
(a word it lacks keeps the row a fresh run draws). A model without one (every published model) first
learns a softmax with every biLM weight frozen (phase "softmax", steps 1..softmax_steps), then trains
everything (phase "all"), in one run: the phase is a function of the step, so a checkpoint in either
phase resumes exactly. The optimizer is built once over every trainable weight, the softmax in its
own first group (its rate is the phase's), so its state loads the same in both phases.
"""

from __future__ import annotations

import os

import torch

from elmo.files.layout import OPTIONS_NAME, VOCAB_NAME
from elmo.formats.lm_vocab import Vocab
from elmo.formats.weights import load_bilm
from elmo.model.options import read_options
from elmo.models import TrainingRun, bundled_models, resolve

from .export import load_run
from .model import LanguageModel
from .settings import RunConfig, StartModel, check
from .softmax import Softmax, load_softmax

PHASES = ("softmax", "all")  # what trains: the softmax alone (biLM frozen), then every trainable weight


def describe_start(reference: str) -> StartModel:
    """What `--init-from reference` names: its architecture and whether it brings a softmax."""
    model = resolve(reference)
    if isinstance(model, TrainingRun):
        options = read_options(model.directory / OPTIONS_NAME).to_options()
        return StartModel(reference, "training run", _architecture(options), True, str(model.directory / VOCAB_NAME))
    files = model.original_files()  # a model in another format refuses here, saying what it needs
    options = read_options(files.options_file).to_options()
    vocab = str(files.vocab_file) if files.vocab_file is not None else None
    return StartModel(reference, _kind(reference), _architecture(options), files.softmax_file is not None, vocab)


def _architecture(options: dict) -> dict:
    """Only what builds the biLM: the start model's training keys (its rate, its epochs) are not the fine-tune's."""
    return {"lstm": dict(options["lstm"]), "char_cnn": dict(options["char_cnn"])}


def _kind(reference: str) -> str:
    if "://" in reference:
        return "model URL"
    if os.path.exists(reference):
        return "model directory" if os.path.isdir(reference) else "model file"
    return "bundled model" if reference in bundled_models() else "published model"


def load_start(reference: str, model: LanguageModel, vocab: Vocab) -> dict:
    """Put `reference`'s biLM weights and (where it has one) softmax rows into `model`, whose softmax
    holds a fresh draw; -> how many of the run's words got the model's rows ("shared") and how many kept
    the fresh draw ("new")."""
    resolved = resolve(reference)
    if isinstance(resolved, TrainingRun):
        source, source_vocab, _ = load_run(resolved.directory)
        bilm_state, softmax = source.bilm.state_dict(), source.softmax
    else:
        files = resolved.original_files()
        bilm_state = load_bilm(files.options_file, files.weight_file).state_dict()
        softmax, source_vocab = None, None
        if files.softmax_file is not None:
            source_vocab = Vocab.load(files.vocab_file) if files.vocab_file is not None else None
            rows = len(source_vocab) if source_vocab is not None else len(vocab)  # no vocab.txt: the run's, as before
            softmax = load_softmax(files.softmax_file, rows, model.bilm.config.projection_dim)
    table = bilm_state["char_encoder.char_embed"]
    if table.shape[0] == model.bilm.char_encoder.char_embed.shape[0] + 1:
        bilm_state["char_encoder.char_embed"] = table[1:]  # a file stored with the zero row first
    model.bilm.load_state_dict(bilm_state)
    if softmax is None:
        return {"shared": 0, "new": len(vocab)}
    return carry_rows(model.softmax, softmax, source_vocab, vocab)


@torch.no_grad()
def carry_rows(target: Softmax, source: Softmax, source_vocab: Vocab | None, vocab: Vocab) -> dict:
    """Each word of `vocab` that `source_vocab` has gets its W row and bias; the others keep `target`'s."""
    if source_vocab is None:  # the same vocabulary (load_softmax checked the size)
        target.W.copy_(source.W)
        target.b.copy_(source.b)
        return {"shared": len(vocab), "new": 0}
    pairs = [(i, source_vocab.index[word]) for i, word in enumerate(vocab.tokens) if word in source_vocab.index]
    if pairs:
        new, old = (torch.tensor(ids) for ids in zip(*pairs))
        target.W[new] = source.W[old].to(target.W.dtype)
        target.b[new] = source.b[old].to(target.b.dtype)
    return {"shared": len(pairs), "new": len(vocab) - len(pairs)}


def optimizer_groups(model: LanguageModel, run: RunConfig) -> list:
    """The optimizer's parameters: one list, or for a run with a softmax phase the softmax first, then the rest."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not run.softmax_steps:
        return params
    softmax = {id(p) for p in model.softmax.parameters()}
    return [{"params": [p for p in params if id(p) in softmax]}, {"params": [p for p in params if id(p) not in softmax]}]


def phase_at(run: RunConfig, step: int) -> str:
    """The phase of the step after `step` updates."""
    return PHASES[0] if step < run.softmax_steps else PHASES[1]


def apply_phase(model: LanguageModel, optimizer: torch.optim.Optimizer, run: RunConfig, step: int,
                trainable: set[str]) -> str:
    """Freeze (phase "softmax") or unfreeze the biLM for the next step and set the softmax group's rate:
    `softmax_lr`, then the run's (the second group's, which a resumed run's --lr may have changed)."""
    phase = phase_at(run, step)
    for name, p in model.named_parameters():
        if name.startswith("bilm."):
            p.requires_grad_(phase == "all" and name in trainable)
    if run.softmax_steps:
        groups = optimizer.param_groups
        groups[0]["lr"] = run.finetune["softmax_lr"] if phase == "softmax" else groups[-1]["lr"]
    return phase


def check_phases(run: RunConfig, max_steps: int) -> None:
    check(run.softmax_steps < max_steps, f"--softmax-steps {run.softmax_steps} leaves no step to train the whole "
          f"model (the run has {max_steps} steps); give more --max-steps/--epochs or fewer --softmax-steps")
