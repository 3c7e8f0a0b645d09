"""What the framework integrations share: model references checked and refused clearly, the torch threads of
each biLM pass, and one batched biLM pass.

Framework-free (torch and this package only), so each integration imports its framework alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from elmo.errors import InputError, ModelFileError
from elmo.hub.catalog import is_url, published_models
from elmo.model.bilm import BiLM
from elmo.model.threads import check_threads, set_threads, usable_cpus
from elmo.models import Model, bundled_models, resolve

REFERENCE_PREFIXES = ("hf://",)


def known_model_names() -> list[str]:
    """Bundled and published names (aliases too), manylangs-XX folded into one entry."""
    names = list(bundled_models())
    manylangs = []
    for model in published_models():
        if model.name.startswith("manylangs-"):
            manylangs.append(model.name.removeprefix("manylangs-"))
        else:
            names.extend((model.name, *model.aliases))
    if manylangs:
        names.append(f"manylangs-XX (XX: {', '.join(manylangs)})")
    return names


def check_reference(model: object, where: str, name: str = "model") -> None:
    """A model reference as a user hands it over: a non-empty string or path (or an `elmo.models.Model`); anything
    else is one InputError naming the argument and what was found (not a TypeError from deep inside)."""
    if isinstance(model, Model):
        return
    text = model if isinstance(model, str) else os.fspath(model) if isinstance(model, os.PathLike) else None
    if not isinstance(text, str) or not text.strip():
        found = f"{type(model).__name__} {model!r:.80}" if not isinstance(model, str) else f"{model!r}"
        raise InputError(f"{where}: {name} must be a model reference (a name such as 'default', a model folder, a "
                         f"URL or hf://OWNER/REPO); found {found}")


def resolve_reference(model: str | os.PathLike | Model | None, options_file=None, weight_file=None) -> Model:
    """`elmo.models.resolve`, except that a name nothing recognises is refused with every known name."""
    if options_file is not None or weight_file is not None:
        if options_file is None or weight_file is None:
            raise InputError("options_file and weight_file go together (or give model= alone)")
        return resolve(options=options_file, weights=weight_file)
    if isinstance(model, Model) or model is None:
        return resolve(model)
    text = os.fspath(model)
    try:
        return resolve(text)
    except ModelFileError as e:
        if os.path.exists(text) or is_url(text) or text.startswith(REFERENCE_PREFIXES) or os.sep in text:
            raise
        raise ModelFileError(f"{text}: unknown ELMo model; known names: {', '.join(known_model_names())}; "
                             "or a model directory, a URL of a model archive, or hf://OWNER/REPO") from e


def layers_in_batch(bilm: BiLM, sentences: Sequence[Sequence[str]], device: torch.device) -> list[torch.Tensor]:
    """One forward pass over all `sentences`: one (L+1, n, D) tensor per sentence on `device`, boundaries removed."""
    if not sentences:
        return []
    bilm.eval()
    with torch.no_grad():
        out = bilm(bilm.batch_to_ids(sentences).to(device))
        stacked = torch.stack(out.layers)  # (L+1, B, T+2, D)
        lengths = (out.mask.sum(1) - 2).tolist()
    return [stacked[:, b, 1 : 1 + n] for b, n in enumerate(lengths)]


# The torch threads of a biLM pass when none are asked for, measured (benchmarks/spacy_threads.py, docs/integrations.md
# "Threads"): one thread.
DEFAULT_THREADS = 1
_STARTED_IN = os.getpid()  # a process with another pid and this module's state was forked from this one


def check_threads_setting(threads: object, where: str) -> int | None:
    """A `threads` setting: a positive int, or None (every CPU the process may use); else one InputError."""
    return None if threads is None else check_threads(threads, f"{where}: threads")


def use_threads(threads: int | None) -> int:
    """Before each biLM pass: torch's intra-op threads as the setting asks, never more than the CPUs this process
    may use (affinity, cgroup quota: `elmo.model.threads.usable_cpus`; None asks for all of them). In a process forked
    after this module loaded (spaCy's `nlp.pipe(n_process=N)`, a preforking server) always one: the OpenMP pool
    belongs to the parent and a forked child that enters it waits forever (and N workers on N cores want one each).
    Returns the count set."""
    if os.getpid() != _STARTED_IN:
        count = 1
    else:
        count = usable_cpus() if threads is None else min(threads, usable_cpus())
    return set_threads(count)


def parameter_device(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device
