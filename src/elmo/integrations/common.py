"""What the framework integrations share: model references with a clear refusal, and one batched biLM pass.

Framework-free (torch and this package only), so each integration imports its framework alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from ..bilm import BiLM
from ..errors import InputError, ModelFileError
from ..hub.catalog import is_url, published_models
from ..models import Model, bundled_models, resolve

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


_THREADS_SET_IN: list[int] = [os.getpid()]  # the process whose torch thread pool is its own


def one_thread_if_forked() -> None:
    """In a process forked after torch ran (spaCy's `nlp.pipe(n_process=N)`, a preforking server), use one torch
    thread: the OpenMP pool belongs to the parent and a forked child that enters it waits forever. One thread per
    worker is also what N workers on N cores want. Called before each biLM pass; costs a getpid."""
    pid = os.getpid()
    if pid != _THREADS_SET_IN[0]:
        torch.set_num_threads(1)
        _THREADS_SET_IN[0] = pid


def parameter_device(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device
