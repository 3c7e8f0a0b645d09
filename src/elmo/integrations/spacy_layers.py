"""ELMo for spaCy's trainable components: the `elmo.ELMoEmbed.v1` architecture (found through the
`spacy_architectures` entry point, so a config needs no import).

Each token gets the paper's task-specific mix of the frozen biLM's layers, `gamma * sum_j softmax(w)_j * h_j`
(Peters et al. 2018, eq. 1), with `w` and `gamma` learned by the component that owns the layer and dropout on
the mix; optionally concatenated with spaCy's own embedding (`embed`, e.g. spacy.MultiHashEmbed.v2), `[x_k;
ELMo_k]`, and projected to `width` for the encoder (spaCy's encoders keep their input width). The biLM runs
inside the layer, once per sentence (a Doc's sentences when it has boundaries, else the whole Doc), and its
layers are cached by the sentence's words: they never change (the biLM is frozen), so every epoch after the
first reads them from the cache (docs/integrations.md: why inside the layer, and what the cache saves).

The biLM's files are kept in the layer's attrs from `initialize` on, in the precision the biLM was loaded in, so a
saved pipeline carries them and loads without the reference in its config (`elmo.integrations.spacy_files`).

`threads`: torch's threads for the biLM's passes (default 1, measured: docs/integrations.md "Threads"; never more
than the CPUs the process may use; null: all of them). `width` is checked against the machine's memory before the
output layer is allocated (at initialize, when the biLM's dimension is known).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
from spacy.tokens import Doc
from thinc.api import Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d

from elmo.errors import InputError, ModelFileError
from elmo.model.allocator import physical_memory
from elmo.model.bilm import BiLM

from .common import (
    DEFAULT_THREADS,
    check_reference,
    check_threads_setting,
    layers_in_batch,
    resolve_reference,
    use_threads,
)
from .spacy_files import bilm_files, bilm_from_files

MIX_NAME = "elmo_mix"
BILM_BATCH = 32  # sentences per biLM pass when filling the cache (sorted by length: little padding)
MAXOUT_PIECES = 3
TRAINING_COPIES = 4  # a parameter in training: its values, its gradient and Adam's two moments


def elmo_embed(width: int, model: str = "default", embed: Model | None = None, dropout: float = 0.5,
               cache_mb: int = 2048, threads: int | None = DEFAULT_THREADS) -> Model[list[Doc], list[Floats2d]]:
    """The architecture: [embed(docs); mix(docs)] (or the mix alone when `embed` is None) -> Maxout to `width`."""
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
        raise InputError(f"elmo.ELMoEmbed.v1: width must be a positive integer; found {width!r}")
    mix = elmo_mix(model, dropout, cache_mb, threads)
    mix.attrs["output_width"] = width  # for the size check at initialize (`_check_output_size`)
    mix.attrs["embed_width"] = (embed.maybe_get_dim("nO") or 0) if embed is not None else 0
    inner = mix if embed is None else concatenate(embed, mix)
    return chain(inner, with_array(Maxout(width, nP=3, dropout=0.0, normalize=True)))


def elmo_mix(model: str = "default", dropout: float = 0.5, cache_mb: int = 2048,
             threads: int | None = DEFAULT_THREADS) -> Model[list[Doc], list[Floats2d]]:
    """The learned scalar mix of the frozen biLM's layers, one (n, D) array per Doc; params `scalar_weights`
    (pre-softmax, one per layer, starting equal) and `gamma` (starting at 1)."""
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise InputError(f"elmo.ELMoEmbed.v1: dropout must be a number in [0, 1); found {dropout!r}")
    if not isinstance(cache_mb, int) or isinstance(cache_mb, bool) or cache_mb < 0:
        raise InputError(f"elmo.ELMoEmbed.v1: cache_mb must be an integer >= 0; found {cache_mb!r}")
    if not isinstance(model, str):  # a config gives strings; a Model or a path object would not survive saving
        raise InputError(f"elmo.ELMoEmbed.v1: model must be a model reference (a name, folder, URL or hf://...) as a "
                         f"string; found {type(model).__name__} {model!r:.80}")
    check_reference(model, "elmo.ELMoEmbed.v1")
    runner = LayerRunner(model, cache_mb, check_threads_setting(threads, "elmo.ELMoEmbed.v1"))
    return Model(MIX_NAME, _mix_forward, init=_mix_init, dims={"nO": None},
                 params={"scalar_weights": None, "gamma": None},
                 attrs={"elmo_model": model, "elmo_files": None, "mix_dropout": float(dropout),
                        "elmo_runner": runner})


class LayerRunner:
    """The frozen biLM and its cache of layers by sentence words, shared by copies of the layer (thinc deep-copies
    attrs; a frozen biLM and its outputs are the same for every copy). Never serialized (thinc skips attrs
    msgpack cannot write): the biLM's files travel in the `elmo_files` attr instead."""

    def __init__(self, reference: str, cache_mb: int, threads: int | None = DEFAULT_THREADS):
        self.reference = reference
        self.threads = threads
        self.cache_limit = cache_mb * 2**20
        self.cache: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()
        self.cache_bytes = 0
        self.hits = self.misses = 0
        self.bilm: BiLM | None = None
        self._files_id: int | None = None

    def __deepcopy__(self, memo: dict) -> LayerRunner:
        return self

    def use(self, files: object) -> BiLM:
        """The biLM for the current `elmo_files` attr: loaded from them when they changed (from_bytes), from the
        reference when there are none yet."""
        if files is not None and id(files) != self._files_id:
            self.bilm = bilm_from_files(files, f"the ELMo layer of a saved spaCy model ({self.reference})").eval()
            self._files_id = id(files)
            self.clear()
        elif self.bilm is None:
            self.bilm = resolve_reference(self.reference).load().eval()
        return self.bilm

    def clear(self) -> None:
        self.cache.clear()
        self.cache_bytes = 0

    def layers(self, docs: Sequence[Doc]) -> list[np.ndarray]:
        """One (L+1, n, D) float32 array per Doc, its sentences' layers side by side along the tokens."""
        pieces = [_sentences(doc) for doc in docs]
        missing = sorted({words for words_list in pieces for words in words_list if words not in self.cache},
                         key=len)
        computed = self._compute(missing)
        out = []
        for words_list in pieces:
            arrays = [computed[words] if words in computed else self._cached(words) for words in words_list]
            out.append(np.concatenate(arrays, axis=1) if arrays else self._empty())
        return out

    def _cached(self, words: tuple[str, ...]) -> np.ndarray:
        self.hits += 1
        self.cache.move_to_end(words)
        return self.cache[words]

    def _compute(self, sentences: list[tuple[str, ...]]) -> dict[tuple[str, ...], np.ndarray]:
        computed: dict[tuple[str, ...], np.ndarray] = {}
        if sentences:
            use_threads(self.threads)
        for start in range(0, len(sentences), BILM_BATCH):
            chunk = [s for s in sentences[start : start + BILM_BATCH] if s]
            for words, layers in zip(chunk, layers_in_batch(self.bilm, [list(s) for s in chunk], _cpu())):
                computed[words] = layers.numpy()
        computed.update({s: self._empty() for s in sentences if not s})
        self.misses += len(sentences)
        for words, layers in computed.items():
            self._store(words, layers)
        return computed

    def _store(self, words: tuple[str, ...], layers: np.ndarray) -> None:
        if layers.nbytes > self.cache_limit:
            return
        self.cache[words] = layers
        self.cache_bytes += layers.nbytes
        while self.cache_bytes > self.cache_limit:
            _, dropped = self.cache.popitem(last=False)
            self.cache_bytes -= dropped.nbytes

    def _empty(self) -> np.ndarray:
        return np.zeros((self.bilm.num_layers, 0, self.bilm.output_dim()), dtype=np.float32)


def _sentences(doc: Doc) -> list[tuple[str, ...]]:
    """The words of each sentence when the Doc has sentence boundaries, else of the whole Doc (ELMo's models are
    trained on sentences: a long document as one sequence is not what they saw)."""
    if len(doc) and doc.has_annotation("SENT_START"):
        return [tuple(token.text for token in sent) for sent in doc.sents]
    return [tuple(token.text for token in doc)] if len(doc) else []


def _cpu():
    import torch

    return torch.device("cpu")


def _mix_init(model: Model, X: list[Doc] | None = None, Y=None) -> Model:
    runner: LayerRunner = model.attrs["elmo_runner"]
    bilm = runner.use(model.attrs["elmo_files"])
    if model.attrs["elmo_files"] is None:
        model.attrs["elmo_files"] = bilm_files(bilm, f"the ELMo layer ({runner.reference})")
        runner._files_id = id(model.attrs["elmo_files"])
    model.set_dim("nO", bilm.output_dim())
    _check_output_size(model, bilm.output_dim())
    model.set_param("scalar_weights", model.ops.alloc1f(bilm.num_layers))
    model.set_param("gamma", model.ops.asarray1f([1.0]))
    return model


def _check_output_size(model: Model, elmo_dim: int) -> None:
    """Before the output layer (Maxout, `width` x 3 pieces x its input) is allocated: refuse a `width` whose weights
    in training exceed this machine's memory, with the sizes, instead of a MemoryError from inside thinc."""
    width, memory = model.attrs.get("output_width"), physical_memory()
    if not width or memory is None:
        return
    inputs = elmo_dim + int(model.attrs.get("embed_width") or 0)
    need = 4 * TRAINING_COPIES * width * MAXOUT_PIECES * inputs
    if need > memory:
        raise InputError(f"elmo.ELMoEmbed.v1: width {width:,} makes an output layer of {width:,} x {MAXOUT_PIECES} x "
                         f"{inputs:,} weights, {need / 2**30:,.1f} GiB in training (float32 values, gradients and "
                         f"Adam's two moments), more than this machine's {memory / 2**30:,.1f} GiB of memory; "
                         f"spaCy's encoders use widths of 64 to 1024")


def _softmax(w: np.ndarray) -> np.ndarray:
    e = np.exp(w - w.max())
    return e / e.sum()


def _mix_forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats2d], Callable]:
    runner: LayerRunner = model.attrs["elmo_runner"]
    w, gamma, rate = _checked_settings(model, runner.use(model.attrs["elmo_files"]))
    layer_arrays = runner.layers(docs)
    s = _softmax(w)
    rate = rate if is_train else 0.0
    masks = [_dropout_mask(layers.shape[1:], rate) for layers in layer_arrays]
    outputs = [gamma * np.tensordot(s, layers, axes=1) for layers in layer_arrays]
    if rate:
        outputs = [y * mask for y, mask in zip(outputs, masks)]

    def backprop(d_outputs: list[Floats2d]) -> list:
        per_layer = np.zeros(len(s), dtype=np.float64)  # sum over tokens of dY . h_j
        for layers, dY, mask in zip(layer_arrays, d_outputs, masks):
            dY = model.ops.to_numpy(dY) if mask is None else model.ops.to_numpy(dY) * mask
            per_layer += np.einsum("lnd,nd->l", layers, dY, dtype=np.float64)
        d_gamma = float(np.dot(s, per_layer))
        d_s = gamma * per_layer
        d_w = s * (d_s - np.dot(s, d_s))
        model.inc_grad("scalar_weights", model.ops.asarray1f(d_w.astype(np.float32)))
        model.inc_grad("gamma", model.ops.asarray1f([d_gamma]))
        return []

    return [model.ops.asarray2f(np.ascontiguousarray(y, dtype=np.float32)) for y in outputs], backprop


def _checked_settings(model: Model, bilm: BiLM) -> tuple[np.ndarray, float, float]:
    """The mix's weights, gamma and dropout, checked: a saved model (from_bytes) can hold any numbers, and
    every number read back is validated as options.json is."""
    where = f"the ELMo layer of a spaCy model ({model.attrs.get('elmo_model')!r})"
    w = np.asarray(model.ops.to_numpy(model.get_param("scalar_weights")), dtype=np.float32)
    gamma = np.asarray(model.ops.to_numpy(model.get_param("gamma")), dtype=np.float32)
    if w.shape != (bilm.num_layers,) or gamma.shape != (1,):
        raise ModelFileError(f"{where}: expected {bilm.num_layers} layer weights and one gamma for its biLM; "
                             f"found shapes {w.shape} and {gamma.shape}")
    if not (np.isfinite(w).all() and np.isfinite(gamma).all()):
        raise ModelFileError(f"{where}: the layer weights and gamma must be finite; found {w.tolist()}, {gamma[0]}")
    rate = model.attrs.get("mix_dropout")
    if not isinstance(rate, float) or not 0 <= rate < 1:
        raise ModelFileError(f"{where}: mix_dropout must be a number in [0, 1); found {rate!r}")
    return w, float(gamma[0]), rate


def _dropout_mask(shape: tuple[int, ...], rate: float) -> np.ndarray | None:
    if not rate:
        return None
    return (np.random.random_sample(shape) >= rate).astype(np.float32) / (1.0 - rate)


def layer_weights(nlp_or_model) -> dict[str, dict[str, object]]:
    """The learned mixes of a pipeline (or one thinc model): {component: {"weights": softmax(w) per layer, token
    layer first, "gamma": gamma}}; a component with several ELMo layers gets "#1", "#2" after its name."""
    if isinstance(nlp_or_model, Model):
        models = [("model", nlp_or_model)]
    else:
        models = [(name, proc.model) for name, proc in nlp_or_model.pipeline if isinstance(getattr(proc, "model", None),
                                                                                         Model)]
    found: dict[str, dict[str, object]] = {}
    for name, root in models:
        mixes = [node for node in root.walk() if node.name == MIX_NAME and node.has_param("scalar_weights")]
        for k, node in enumerate(mixes, 1):
            w = np.asarray(node.ops.to_numpy(node.get_param("scalar_weights")), dtype=np.float64)
            key = name if len(mixes) == 1 else f"{name}#{k}"
            found[key] = {"weights": _softmax(w).tolist(),
                          "gamma": float(node.ops.to_numpy(node.get_param("gamma"))[0])}
    return found
