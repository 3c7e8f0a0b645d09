"""Panels 1-3: one word in several sentences (static vs contextual, the layer mix) and one token
taken through the char CNN, highway, projection and LSTM layers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elmo.model.chars import PAD_CHAR, token_to_ids

from .inputs import LabInputError, Limits, field, number_list, paragraph_sentences, sentence_tokens, token_index
from .lab_models import LabModels
from .reference import ReferenceSet
from .trace import char_label, char_stages, ngram_text
from .vectors import cosine, pairwise_cosine, pca_2d, softmax_weights, top_k


@dataclass
class Occurrence:
    sentence: int
    index: int
    token: str
    sense: str
    layers: np.ndarray  # (L+1, D)


def parse_word_sentences(payload: dict, limits: Limits) -> tuple[str, list[list[str]], list[str]]:
    """{"word": w, "sentences": [text | tokens | {"text":..., "sense":...}]} -> word, tokens, senses."""
    word = field(payload, "word", str).strip()
    if not word or len(word) > 50 or any(c.isspace() for c in word):
        raise LabInputError("'word' must be one word (no spaces, at most 50 characters)")
    items = field(payload, "sentences", list)
    if len(items) > limits.max_sentences:
        raise LabInputError(f"{len(items)} sentences; the lab takes at most {limits.max_sentences}", 413)
    if len(items) < 2:
        raise LabInputError("give at least two sentences to compare")
    sentences, senses = [], []
    for n, item in enumerate(items, 1):
        sense = ""
        if isinstance(item, dict):
            sense = item.get("sense") or ""
            if not isinstance(sense, str) or len(sense) > 40:
                raise LabInputError(f"sentence {n}: 'sense' must be a short string")
            item = item.get("text")
        sentences.append(sentence_tokens(item, limits, f"sentence {n}"))
        senses.append(sense.strip())
    return word, sentences, senses


def find_occurrences(lab: LabModels, word: str, sentences: list[list[str]], senses: list[str]) -> list[Occurrence]:
    arrays = lab.embed(sentences)
    found = []
    for s, (tokens, arr) in enumerate(zip(sentences, arrays)):
        hits = [i for i, t in enumerate(tokens) if t.lower() == word.lower()]
        if not hits:
            raise LabInputError(f"sentence {s + 1} does not contain the word '{word}'")
        found += [Occurrence(s, i, tokens[i], senses[s], arr[:, i]) for i in hits]
    return found


def sense_distances(vectors: np.ndarray, senses: list[str]) -> dict:
    """Mean cosine distance between occurrences of different senses, within a sense, and overall."""
    dist = 1.0 - pairwise_cosine(vectors)
    n = len(senses)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    labelled = len({s for s in senses if s}) >= 2 and all(senses)
    out = {"mean": round(float(np.mean([dist[a, b] for a, b in pairs])), 4) if pairs else 0.0}
    if labelled:
        between = [dist[a, b] for a, b in pairs if senses[a] != senses[b]]
        within = [dist[a, b] for a, b in pairs if senses[a] == senses[b]]
        out["between"] = round(float(np.mean(between)), 4)
        out["within"] = round(float(np.mean(within)), 4) if within else None
    return out


def plot_points(groups: list[tuple[str, list[str], list[str], list[np.ndarray]]]) -> dict:
    """[(kind, labels, senses, vectors)] -> one 2-D PCA of all the vectors, as points for the page."""
    vectors = [v for _, _, _, vs in groups for v in vs]
    coords, variance = pca_2d(np.stack(vectors))
    points, k = [], 0
    for kind, labels, senses, _ in groups:
        for label, sense in zip(labels, senses):
            points.append({"kind": kind, "label": label, "sense": sense,
                           "x": round(float(coords[k, 0]), 4), "y": round(float(coords[k, 1]), 4)})
            k += 1
    return {"points": points, "variance": [round(v, 4) for v in variance]}


def contextual(lab: LabModels, ref: ReferenceSet, payload: dict, limits: Limits) -> dict:
    """Panel 1: the word's static point (layer 0) against its contextual points, with neighbours."""
    word, sentences, senses = parse_word_sentences(payload, limits)
    top = lab.num_layers - 1
    layer = field(payload, "layer", int, top)
    if not 1 <= layer <= top:
        raise LabInputError(f"'layer' must be between 1 and {top}")
    occ = find_occurrences(lab, word, sentences, senses)
    static = np.stack([o.layers[0] for o in occ])
    spellings = sorted({o.token for o in occ})
    spread = float((1.0 - pairwise_cosine(static)).max()) if len(occ) > 1 else 0.0
    distances = [{"layer": j, **sense_distances(np.stack([o.layers[j] for o in occ]), [o.sense for o in occ])}
                 for j in range(lab.num_layers)]
    found = [ref.nearest(f"layer{layer}", o.layers[layer], 5) for o in occ]
    near = sorted({i for f in found for i, _ in f})
    plot = plot_points([
        ("static", [f"{s} (static)" for s in spellings], [""] * len(spellings),
         [static[[o.token for o in occ].index(s)] for s in spellings]),  # one point per spelling
        ("context", [f"{o.token} #{o.sentence + 1}" for o in occ], [o.sense for o in occ],
         [o.layers[layer] for o in occ]),
        ("neighbour", [str(ref.tokens[i]) for i in near], [""] * len(near), [ref.layers[i, layer] for i in near]),
    ])
    half = lab.bilm.config.projection_dim
    return {
        "word": word, "layer": layer, "layers": lab.num_layers,
        "static": {"points": len(spellings), "spellings": spellings, "spread": round(spread, 4),
                   "neighbours": ref.neighbours("projection", static[0, :half], 5)},
        "occurrences": [{"sentence": o.sentence, "index": o.index, "token": o.token, "sense": o.sense,
                         "text": " ".join(sentences[o.sentence]), "neighbours": [ref.describe(i, sim) for i, sim in f]}
                        for o, f in zip(occ, found)],
        "distances": distances,
        "plot": plot,
        "paragraph": after_paragraph(lab, ref, payload, limits, sentences, occ, found, layer),
    }


def after_paragraph(lab: LabModels, ref: ReferenceSet, payload: dict, limits: Limits, sentences: list[list[str]],
                    occ: list[Occurrence], found: list[list[tuple[int, float]]], layer: int) -> dict | None:
    """Panel 1's option: each occurrence with an optional paragraph read before its sentence (document
    context) against without: the cosine of the two vectors per layer, of their forward halves (the
    backward LM reads from the end, so it sees no paragraph before it), and the neighbours that change."""
    text = field(payload, "paragraph", str, "")
    if not text.strip():
        return None
    paragraph = paragraph_sentences(text, limits)
    after = lab.embed_after(paragraph, sentences)
    half = lab.bilm.config.projection_dim
    rows = []
    for o, alone in zip(occ, found):
        v = after[o.sentence][:, o.index]
        near = ref.nearest(f"layer{layer}", v[layer], 5)
        rows.append({"sentence": o.sentence, "token": o.token,
                     "cosine": [round(cosine(v[j], o.layers[j]), 4) for j in range(lab.num_layers)],
                     "forward_cosine": [round(cosine(v[j, :half], o.layers[j, :half]), 4) for j in range(lab.num_layers)],
                     "neighbours": [ref.describe(i, sim) for i, sim in near],
                     "new_neighbours": len({i for i, _ in near} - {i for i, _ in alone})})
    return {"sentences": len(paragraph), "tokens": sum(map(len, paragraph)), "occurrences": rows}


def mix(lab: LabModels, ref: ReferenceSet, payload: dict, limits: Limits) -> dict:
    """Panel 3: gamma * sum_j softmax(w)_j h_j for each occurrence; similarities and neighbours."""
    word, sentences, senses = parse_word_sentences(payload, limits)
    w = number_list(payload, "scalar_parameters", lab.num_layers, -20.0, 20.0)
    gamma = field(payload, "gamma", (int, float))
    if not 0.0 <= gamma <= 100.0:
        raise LabInputError("'gamma' must be between 0 and 100")
    s = softmax_weights(w)
    occ = find_occurrences(lab, word, sentences, senses)
    mixed = np.stack([gamma * np.einsum("j,jd->d", s, o.layers) for o in occ])
    sims = pairwise_cosine(mixed) if gamma > 0 else np.zeros((len(occ), len(occ)))
    units = ref.mixed_units(s)
    rows = [{"sentence": o.sentence, "token": o.token, "sense": o.sense, "norm": round(float(np.linalg.norm(v)), 4),
             "neighbours": [ref.describe(i, sim) for i, sim in (top_k(v, units, 3) if gamma > 0 else [])]}
            for o, v in zip(occ, mixed)]
    return {"weights": [round(float(x), 4) for x in s], "gamma": gamma, "occurrences": rows,
            "similarity": np.round(sims, 4).tolist(),
            "distance": sense_distances(mixed, [o.sense for o in occ]) if gamma > 0 else {"mean": 0.0}}


def build(lab: LabModels, ref: ReferenceSet, payload: dict, limits: Limits) -> dict:
    """Panel 2: one token through characters, char CNN, highway, projection, then each LSTM layer."""
    tokens = sentence_tokens(field(payload, "sentence", (str, list)), limits)
    index = token_index(payload, tokens)
    token = tokens[index]
    ids = token_to_ids(token)
    pad = PAD_CHAR + 1
    n_real = ids.index(pad) if pad in ids else len(ids)  # up to the first padding code
    st = char_stages(lab.bilm.char_encoder, [token])
    cnn = st.cnn[0].numpy()
    top = np.argsort(-cnn, kind="stable")[:8]
    filters = [{"filter": int(f), "width": st.widths[f], "value": round(float(cnn[f]), 4),
                "start": int(st.best_pos[0, f]), "ngram": ngram_text(ids, int(st.best_pos[0, f]), st.widths[f])}
               for f in top]
    arr = lab.embed([tokens])[0][:, index]  # (L+1, D)
    half = lab.bilm.config.projection_dim
    proj = st.projection[0].numpy()

    def stage(name: str, vec: np.ndarray, table: str, note: str = "") -> dict:
        return {"stage": name, "dim": int(vec.shape[0]), "norm": round(float(np.linalg.norm(vec)), 4),
                "preview": [round(float(x), 4) for x in vec[:16]], "note": note,
                "neighbours": ref.neighbours(table, vec, 5)}

    stages = [stage("char CNN (max over positions)", cnn, "cnn", f"{len(cnn)} filters")]
    for k, (h, g) in enumerate(zip(st.highway, st.gates)):
        stages.append(stage(f"highway {k + 1}", h[0].numpy(), f"highway{k + 1}",
                            f"mean gate {float(g[0]):.3f}: share taken from the transform, the rest carried"))
    stages.append(stage("projection = layer 0 (context-free)", proj, "projection"))
    for j in range(1, lab.num_layers):
        stages.append(stage(f"layer {j} forward (reads left to right)", arr[j, :half], f"layer{j}.forward"))
        stages.append(stage(f"layer {j} backward (reads right to left)", arr[j, half:], f"layer{j}.backward"))
    return {
        "token": token, "index": index, "tokens": tokens,
        "chars": [{"id": i, "label": char_label(i)} for i in ids[:n_real]], "padding": len(ids) - n_real,
        "filters": filters, "stages": stages,
        "layer0_matches": bool(np.allclose(proj, arr[0, :half], atol=1e-4)),
    }
