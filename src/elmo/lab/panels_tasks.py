"""Panels 4, 6 and 7: ELMo plugged into a tagger, the two LMs' predictions, and the results table."""

from __future__ import annotations

import numpy as np
import torch

from elmo.model.chars import batch_to_ids

from .inputs import Limits, field, sentence_tokens
from .lab_models import LabModels
from .reference import ReferenceSet
from .results import results_table
from .vectors import softmax_weights


def _summary(vec: np.ndarray, n: int = 12) -> dict:
    return {"dim": int(vec.shape[0]), "norm": round(float(np.linalg.norm(vec)), 4),
            "preview": [round(float(x), 4) for x in vec[:n]]}


def tag(lab: LabModels, ref: ReferenceSet, payload: dict, limits: Limits) -> dict:
    """Panel 4: per token the concatenation [x; ELMo] and each available tagger's prediction."""
    tokens = sentence_tokens(field(payload, "sentence", (str, list)), limits)
    preset = next((p for p in lab.presets if p.name == "NER"), None)
    if preset and len(preset.scalar_parameters) == lab.num_layers:
        s, gamma, mix_name = softmax_weights(list(preset.scalar_parameters)), preset.gamma, "learned by the NER tagger"
    else:
        s, gamma, mix_name = np.full(lab.num_layers, 1.0 / lab.num_layers), 1.0, "equal weights (no learned mix given)"
    parts = lab.taggers["elmo"].input_parts(tokens) if "elmo" in lab.taggers else None
    if parts and "elmo" in parts and parts["elmo"].shape[0] == len(tokens):
        elmo_vecs, mix_name = parts["elmo"], "as the NER tagger computes it"
    else:  # no tagger to ask: mix the biLM's layers here
        elmo_vecs = gamma * np.einsum("j,jnd->nd", s, lab.embed([tokens])[0])
    word_vecs = parts.get("word") if parts else None
    tags = {name: tagger.predict(tokens) for name, tagger in sorted(lab.taggers.items())}
    rows = []
    for i, token in enumerate(tokens):
        row = {"token": token, "elmo": _summary(elmo_vecs[i]),
               "word": _summary(word_vecs[i]) if word_vecs is not None and len(word_vecs) == len(tokens) else None,
               "tags": {name: t[i] for name, t in tags.items()}}
        rows.append(row)
    return {"tokens": tokens, "rows": rows, "mix": {"weights": [round(float(x), 4) for x in s],
            "gamma": round(float(gamma), 4), "source": mix_name},
            "taggers": sorted(lab.taggers), "why": lab.taggers_why,
            "word_why": "" if word_vecs is not None else
            "the tagger's own word vectors x come with the task models" if not lab.taggers else
            "this tagger does not expose its word vectors (input_parts)"}


@torch.no_grad()
def directions(lab: LabModels, ref: ReferenceSet, payload: dict, limits: Limits) -> dict:
    """Panel 6: for each token, the forward LM's guess from its left and the backward LM's from its right."""
    tokens = sentence_tokens(field(payload, "sentence", (str, list)), limits)
    if lab.lm_head is None:
        return {"available": False, "why": lab.lm_why, "tokens": tokens}
    out = lab.bilm(batch_to_ids([tokens]))
    top = out.layers[-1][0].float().numpy()  # (n + 2, 2P), position 0 = <S>, n + 1 = </S>
    p = lab.bilm.config.projection_dim
    n = len(tokens)
    forward = lab.lm_head.predict(top[0:n, :p], tokens)  # position k-1 predicts token k
    backward = lab.lm_head.predict(top[2 : n + 2, p:], tokens)  # position k+1 predicts token k
    rows = [{"token": t, "forward": f, "backward": b} for t, f, b in zip(tokens, forward, backward)]
    return {"available": True, "tokens": tokens, "rows": rows, "vocab_size": len(lab.lm_head.vocab)}


def results(lab: LabModels, ref: ReferenceSet, payload: dict, limits: Limits) -> dict:
    """Panel 7: the paper's Table 1 beside our measured numbers."""
    return {"rows": results_table(lab.results, lab.results_why, lab.data_dir), "source": lab.results_source}
