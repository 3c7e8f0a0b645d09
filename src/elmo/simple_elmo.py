"""simple_elmo's `ElmoModel` (ltgoslo/simple_elmo 0.9.2, TensorFlow) on this package's biLM.

`from elmo.simple_elmo import ElmoModel` is the one change to a simple_elmo user's code: `load`,
`get_elmo_vectors`, `get_elmo_vector_average` and `get_elmo_substitutes` take the same arguments and
return the same shapes and dtypes (float64 arrays zero-padded to the longest sentence). What differs,
on purpose (docs/tensorflow.md):

- Stateless by default: every sentence starts from zero LSTM state, so its vectors do not depend on
  its batch, on the sentences before it or on `warmup`. simple_elmo carries each batch row's state
  into the next batch and, with `warmup=True`, runs the first batch once before the real pass.
  `load(..., stateful=True)` reproduces that exactly (state reset at the start of each call, as its
  fresh TensorFlow session does).
- Token ids never depend on the vocabulary file: `limit` is checked and has no other effect, so a
  vocabulary whose `</S>` lies past line `limit` cannot overwrite a real word's ids (simple_elmo's bug).
- Positions past a sentence's end are zeros in every layer (simple_elmo leaves the token layer of
  padded positions there, and its sentence averages include them).
- `get_elmo_substitutes` reads each whole sentence in both directions (simple_elmo feeds its LM one
  word at a time from zero state), keeps every sentence in input order, ranks candidates and gives
  log-probabilities under `logp` (simple_elmo: unranked raw scores).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from elmo.embed.embedder import Embedder, check_batch_size
from elmo.formats.lm_vocab import Vocab
from elmo.training.softmax import load_softmax

from .errors import InputError, ModelFileError
from .models import Model, resolve

LAYER_MODES = ("average", "top", "all")
LOADED = "The model is now loaded."  # what simple_elmo's load returns


class ElmoModel:
    """Embeddings from Language Models, with simple_elmo's methods. Call `load` first."""

    def __init__(self) -> None:
        self.embedder: Embedder | None = None
        self.batch_size: int | None = None
        self.max_chars: int | None = None
        self.vector_size: int | None = None
        self.n_layers: int | None = None
        self.vocab: Vocab | None = None  # the LM's vocabulary, with `full=True`
        self._softmax: tuple[np.ndarray, np.ndarray] | None = None  # W (V, P), b (V,)

    def load(self, directory: str | os.PathLike | Model, max_batch_size: int = 32, limit: int | None = 100,
             full: bool = False, stateful: bool = False, device: str | torch.device = "cpu") -> str:
        """Load any model reference this package reads (a model directory or archive, a published
        name; see `elmo.models.resolve`). `max_batch_size`: sentences per forward pass. `limit`:
        simple_elmo's vocabulary cache size, accepted and checked, without effect here. `full`: also
        load the LM softmax and vocabulary (softmax.hdf5 + vocab.txt) for `get_elmo_substitutes`.
        `stateful`: carry LSTM state between batches as simple_elmo does (default: no state)."""
        self.batch_size = check_batch_size(max_batch_size, "max_batch_size")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
            raise InputError(f"limit must be a positive integer or None, found {limit!r}")
        model = resolve(directory)
        bilm = model.load(stateful=stateful)
        self.embedder = Embedder(bilm, device=device, batch_size=self.batch_size)
        self.max_chars = bilm.config.max_chars
        self.vector_size = bilm.output_dim()
        self.n_layers = bilm.num_layers
        self.vocab, self._softmax = (None, None)
        if full:
            self._load_softmax(model, bilm.config.projection_dim)
        return LOADED

    def _load_softmax(self, model: Model, projection_dim: int) -> None:
        files = model.original_files()
        if files.vocab_file is None or files.softmax_file is None:
            missing = " and ".join(n for n, f in (("vocab.txt", files.vocab_file), ("softmax.hdf5", files.softmax_file))
                                   if f is None)
            raise ModelFileError(f"{model.name}: full=True needs the LM's softmax.hdf5 and vocab.txt beside the "
                                 f"weights; {missing} missing (`elmo export` writes both; a bilm-tf checkpoint "
                                 "has them through `elmo import-tf`)")
        self.vocab = Vocab.load(files.vocab_file)
        softmax = load_softmax(files.softmax_file, len(self.vocab), projection_dim)
        self._softmax = (softmax.W.detach().numpy(), softmax.b.detach().numpy())

    def _loaded(self) -> Embedder:
        if self.embedder is None:
            raise InputError("no model loaded: call ElmoModel().load(path) first")
        return self.embedder

    @property
    def stateful(self) -> bool:
        return self._loaded().stateful

    def get_elmo_vectors(self, texts: Sequence[Sequence[str]], warmup: bool = True, layers: str = "average",
                         session: object = None) -> np.ndarray:
        """Token vectors, float64: (N, T, D) for "average" (the layers' mean) and "top", (N, L, T, D)
        for "all"; T is the longest sentence, positions past a sentence's end are zeros. `warmup` runs
        the first batch once before the real pass when the model is stateful (otherwise it would
        change nothing and is skipped). `session` (TensorFlow's) is not used."""
        check_layer_mode(layers)
        arrays = self._layer_arrays(texts, warmup)
        longest = max((a.shape[1] for a in arrays), default=0)
        shape = (len(arrays), self.n_layers, longest, self.vector_size) if layers == "all" else \
            (len(arrays), longest, self.vector_size)
        out = np.zeros(shape)
        for row, arr in enumerate(arrays):
            out[row, ..., : arr.shape[1], :] = pick_layers(arr, layers)
        return out

    def get_elmo_vector_average(self, texts: Sequence[Sequence[str]], warmup: bool = True, layers: str = "average",
                                session: object = None) -> np.ndarray:
        """One float64 vector per sentence: the mean of its tokens' vectors scaled to unit length, (N, D);
        for "all", (N, L, D), each layer's mean, the whole (L, D) matrix scaled to unit (Frobenius)
        norm as simple_elmo scales it. An empty sentence gives zeros."""
        check_layer_mode(layers)
        arrays = self._layer_arrays(texts, warmup)
        shape = (len(arrays), self.n_layers, self.vector_size) if layers == "all" else (len(arrays), self.vector_size)
        out = np.zeros(shape)
        for row, arr in enumerate(arrays):
            if arr.shape[1] == 0:
                continue
            mean = pick_layers(arr, layers).astype(np.float64).mean(axis=-2)
            norm = np.linalg.norm(mean)
            out[row] = mean / norm if norm > 0 else mean
        return out

    def _layer_arrays(self, texts: Sequence[Sequence[str]], warmup: bool) -> list[np.ndarray]:
        """(L, n, D) float32 per sentence, in input order."""
        embedder = self._loaded()
        texts = check_texts(texts)
        if not embedder.stateful:
            return list(embedder.embed_sentences(texts, layers="all", batch_size=self.batch_size))
        embedder.reset_states()  # simple_elmo's fresh session starts each call from zero state
        chunks = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        if warmup and chunks:
            embedder.embed_batch(chunks[0])
        return [arr for chunk in chunks for arr in embedder.embed_batch(chunk)]

    def get_elmo_substitutes(self, data: Sequence[str], topn: int = 3, nodelimiters: bool = True) -> list[list[dict]]:
        """The LM's most probable words at each position of each sentence (whitespace-separated strings),
        in input order: per token {"word", "forward": {...}, "backward": {...}}, each direction with
        "candidates" (vocabulary ids), "candidate_words" and "logp" (log-probabilities, 4 decimals), best
        first. Forward predicts the token from the words before it, backward from the words after it.
        `nodelimiters` leaves <S> and </S> out of the candidates. Needs `load(..., full=True)`."""
        embedder = self._loaded()
        if self._softmax is None or self.vocab is None:
            raise InputError("get_elmo_substitutes needs the LM's softmax: load the model with full=True")
        if isinstance(topn, bool) or not isinstance(topn, int) or not 0 < topn <= len(self.vocab):
            raise InputError(f"topn must be an integer in 1..{len(self.vocab)}, found {topn!r}")
        if isinstance(data, str) or not all(isinstance(s, str) for s in data):
            raise InputError("get_elmo_substitutes takes a list of sentences, each one string of "
                             "whitespace-separated tokens")
        sentences = [s.split() for s in data]
        excluded = [self.vocab.bos, self.vocab.eos] if nodelimiters else []
        results = []
        for start in range(0, len(sentences), self.batch_size):
            batch = sentences[start : start + self.batch_size]
            for tokens, top in zip(batch, top_layer_with_markers(embedder, batch)):
                results.append(self._substitutes(tokens, top, topn, excluded))
        return results

    def _substitutes(self, tokens: list[str], top: np.ndarray, topn: int, excluded: list[int]) -> list[dict]:
        p, n = top.shape[1] // 2, len(tokens)
        forward = self._ranked(top[0:n, :p], topn, excluded)  # position k-1 predicts token k
        backward = self._ranked(top[2 : n + 2, p:], topn, excluded)  # position k+1 predicts token k
        return [{"word": word, "forward": f, "backward": b} for word, f, b in zip(tokens, forward, backward)]

    def _ranked(self, hidden: np.ndarray, topn: int, excluded: list[int]) -> list[dict]:
        weight, bias = self._softmax
        logits = torch.from_numpy(hidden.astype(np.float32)) @ torch.from_numpy(weight).T + torch.from_numpy(bias)
        logp = torch.log_softmax(logits, dim=-1)
        ranked = logp.clone()
        ranked[:, excluded] = -torch.inf
        best = torch.topk(ranked, topn, dim=-1).indices
        return [{"candidates": ids.tolist(), "candidate_words": [self.vocab.tokens[i] for i in ids.tolist()],
                 "logp": [round(float(v), 4) for v in row[ids]]} for ids, row in zip(best, logp)]


def top_layer_with_markers(embedder: Embedder, batch: list[list[str]]) -> list[np.ndarray]:
    """The top layer (n+2, 2P) of each sentence with its <S>/</S> positions, each from zero state."""
    if not batch:
        return []
    bilm = embedder.bilm
    if bilm.stateful:
        bilm.reset_states()
    with torch.no_grad():
        out = bilm(bilm.batch_to_ids(batch).to(embedder.device))
    if bilm.stateful:
        bilm.reset_states()
    top = out.layers[-1].float().cpu().numpy()
    return [top[row, : len(tokens) + 2] for row, tokens in enumerate(batch)]


def check_layer_mode(layers: object) -> None:
    if layers not in LAYER_MODES:
        raise InputError(f"layers must be one of {', '.join(LAYER_MODES)}, found {layers!r}")


def check_texts(texts: Sequence[Sequence[str]]) -> list[Sequence[str]]:
    """Tokenized sentences: a plain string would be read one character per token, silently."""
    how = "split strings first, e.g. [s.split() for s in sentences]"
    if not isinstance(texts, Iterable):
        raise InputError(f"texts must be tokenized sentences (a list of lists of str), found {type(texts).__name__}")
    texts = [texts] if isinstance(texts, str) else list(texts)
    for i, text in enumerate(texts):
        if isinstance(text, (str, bytes)) or not isinstance(text, Iterable):
            raise InputError(f"texts must be tokenized sentences (a list of lists of str); texts[{i}] is "
                             f"{type(text).__name__} {str(text)[:40]!r}: {how}")
        texts[i] = text = text if isinstance(text, Sequence) else list(text)
        if not all(isinstance(w, str) for w in text):
            raise InputError(f"texts must be tokenized sentences (a list of lists of str); texts[{i}] holds a "
                             f"token that is not a string: {how}")
    return texts


def pick_layers(arr: np.ndarray, mode: str) -> np.ndarray:
    """(L, n, D) -> (L, n, D) for "all", (n, D) for "top" and "average" (the unweighted mean)."""
    if mode == "all":
        return arr
    return arr[-1] if mode == "top" else arr.mean(axis=0)
