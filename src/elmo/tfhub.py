"""A drop-in for TF-Hub's ELMo: `from elmo.tfhub import Module` in place of `tensorflow_hub`'s `hub.Module`.

    elmo = Module("https://tfhub.dev/google/elmo/3")          # or a module folder, its .tar.gz, a Kaggle handle
    out = elmo(["the cat is on the mat", "dogs are in the fog"], signature="default", as_dict=True)
    out = elmo({"tokens": [["the", "cat"], ["dogs", ""]], "sequence_len": [2, 1]}, signature="tokens", as_dict=True)

Returns numpy float32 arrays with TF-Hub's names and shapes: `word_emb` [B, T, P], `lstm_outputs1`, `lstm_outputs2`
and `elmo` [B, T, 2P], `default` [B, 2P] (`as_dict=False`: `default` alone). Computed as bilm-tf's graph computes
them (tests/test_tfhub_module.py holds them to TensorFlow's own outputs): `default` splits each sentence on spaces,
empty pieces dropped (TensorFlow 1's StringSplit); `elmo` = scaling * sum_j softmax(weights)_j * layer_j; padded
positions as the graph fills them (word_emb: the character CNN of an all-padding token, LSTM outputs 0, elmo the mix
of those); `default` the mean of `elmo` over each sentence's tokens (google/elmo/3), or over every position,
padding included, for google/elmo/1 and /2 (`default_pooling="all"`, chosen from the handle when it names them).
Empty inputs: an empty batch, or one whose sentences hold no token at all, is refused (InputError), as the graph
refuses it (InvalidArgumentError); an empty sentence beside others gets `default` 0 where the graph divides 0 by 0.

A module built from bilm-tf's graph carries each batch row's LSTM state from one call to the next (per signature),
so the same input gives other outputs on a second call. Here every call starts from zero unless `stateful=True`,
which reproduces the carried state. `trainable` is accepted for the same code to run; training the mix is done in
PyTorch with `scalar_mix()`. Sits above the core: it resolves references through elmo.models.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from elmo.model.bilm import BiLM
from elmo.model.boundaries import remove_sentence_boundaries
from elmo.model.chars import MAX_CHARS, batch_to_ids
from elmo.model.row_states import RowStates
from elmo.model.scalar_mix import ScalarMix

from .errors import InputError, ModelFileError

SIGNATURES = ("default", "tokens")
OUTPUTS = ("word_emb", "lstm_outputs1", "lstm_outputs2", "elmo", "default")
POOLINGS = ("tokens", "all")


class Module:
    """TF-Hub's ELMo module, called as TF-Hub's `hub.Module` is (module docstring)."""

    def __init__(self, spec: str | os.PathLike, trainable: bool = False, name: str | None = None,
                 stateful: bool = False, default_pooling: str | None = None) -> None:
        from elmo.tf.hub_handles import parse_handle
        from elmo.tf.hub_import import read_mix

        from .models import OriginalModel, resolve

        model = resolve(os.fspath(spec))
        mix = read_mix(model.files.options_file.parent) if isinstance(model, OriginalModel) else None
        if mix is None:
            raise ModelFileError(f"{os.fspath(spec)}: not a TF-Hub module (a folder with saved_model.pb and variables/, "
                                 "its .tar.gz, or a handle such as https://tfhub.dev/google/elmo/3); for other models "
                                 "use elmo.Embedder or elmo.Elmo")
        handle = parse_handle(os.fspath(spec))
        if default_pooling is None:
            default_pooling = "all" if handle is not None and handle.version in (1, 2) else "tokens"
        if default_pooling not in POOLINGS:
            raise InputError(f"default_pooling must be one of {POOLINGS}, found {default_pooling!r}")
        self.name, self.trainable, self.default_pooling = name or os.fspath(spec), trainable, default_pooling
        self.mix_weights, self.scaling = mix
        self.bilm: BiLM = model.load(stateful=stateful)
        self.bilm.eval()
        self._states = {signature: RowStates() for signature in SIGNATURES}  # the graph keeps one state per signature

    def get_signature_names(self) -> list[str]:
        return list(SIGNATURES)

    def get_output_info_dict(self, signature: str = "default") -> dict[str, tuple[tuple[int | None, ...], str]]:
        """Output name -> (shape with None for batch and time, dtype), as TF-Hub describes them."""
        _check_signature(signature)
        p = self.bilm.config.projection_dim
        return {"word_emb": ((None, None, p), "float32"), "lstm_outputs1": ((None, None, 2 * p), "float32"),
                "lstm_outputs2": ((None, None, 2 * p), "float32"), "elmo": ((None, None, 2 * p), "float32"),
                "default": ((None, 2 * p), "float32")}

    def scalar_mix(self, trainable: bool = True) -> ScalarMix:
        """A ScalarMix starting from the module's `aggregation/weights` and `aggregation/scaling`, for training on."""
        mix = ScalarMix(len(self.mix_weights), initial_scalar_parameters=self.mix_weights, trainable=trainable)
        with torch.no_grad():
            mix.gamma.fill_(self.scaling)
        return mix

    def reset_states(self) -> None:
        """Forget the carried LSTM states (stateful=True): the next call starts from zero, as a fresh module."""
        for states in self._states.values():
            states.clear()

    def __call__(self, inputs, signature: str | None = None, as_dict: bool = False):
        signature = signature or "default"
        _check_signature(signature)
        if signature == "default":
            sentences = split_sentences(inputs)
            width = max((len(s) for s in sentences), default=0)
        else:
            sentences, width = token_inputs(inputs)
        if not sentences or width == 0:  # TensorFlow refuses these too (InvalidArgumentError from the graph)
            raise InputError(f"the {signature} signature got {len(sentences)} sentences of at most {width} tokens: "
                             "nothing to embed (TF-Hub's module refuses an empty batch, or one with no tokens at all, "
                             "with InvalidArgumentError)")
        outputs = self._run(sentences, width, signature)
        return outputs if as_dict else outputs["default"]

    @torch.no_grad()
    def _run(self, sentences: list[list[str]], width: int, signature: str) -> dict[str, np.ndarray]:
        """The five outputs at `width` positions (TF-Hub's max_length: the tokens' width, or the most pieces)."""
        bilm, p = self.bilm, self.bilm.config.projection_dim
        ids = torch.zeros(len(sentences), width, MAX_CHARS, dtype=torch.long)
        if any(sentences):
            found = batch_to_ids(sentences)
            ids[:, : found.shape[1]] = found
        device = bilm.char_encoder.char_embed.device
        bilm._states = self._states[signature]
        out = bilm(ids.to(device))
        layers = [remove_sentence_boundaries(layer, out.mask)[0] for layer in out.layers]
        mask = remove_sentence_boundaries(out.layers[0], out.mask)[1]
        padding = bilm.char_encoder(torch.zeros(1, MAX_CHARS, dtype=torch.long, device=device))[0]
        pad = ~mask.unsqueeze(-1)
        layers[0] = torch.where(pad, torch.cat([padding, padding]).to(layers[0].dtype), layers[0])
        weights = torch.softmax(torch.tensor(self.mix_weights, dtype=torch.float32), 0).to(device)
        elmo = self.scaling * sum(w * layer.float() for w, layer in zip(weights, layers))
        if self.default_pooling == "tokens":
            # a sentence without tokens: 0, where TensorFlow divides 0 by 0 (NaN)
            default = (elmo * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        else:
            default = elmo.mean(1)
        found = {"word_emb": layers[0][..., :p], "lstm_outputs1": layers[1], "lstm_outputs2": layers[2], "elmo": elmo,
                 "default": default}
        return {name: found[name].float().cpu().numpy() for name in OUTPUTS}


def _check_signature(signature: str) -> None:
    if signature not in SIGNATURES:
        raise InputError(f"signature {signature!r}: TF-Hub's ELMo has the signatures {', '.join(SIGNATURES)}")


def _text(value, what: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{what} is not UTF-8 ({value[:40]!r})") from None
    if isinstance(value, (str, np.str_)):
        return str(value)
    raise InputError(f"{what} must be a string, found {type(value).__name__}")


def split_sentences(inputs) -> list[list[str]]:
    """The `default` signature's input, a 1-D list of sentences, split on spaces with empty pieces dropped."""
    if isinstance(inputs, Mapping):
        inputs = inputs.get("default", inputs)
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, (Sequence, np.ndarray)) or np.ndim(inputs) != 1:
        raise InputError("the default signature takes a 1-D list of sentences (strings), found "
                         f"{type(inputs).__name__} of shape {np.shape(inputs) if not isinstance(inputs, str) else '()'}")
    return [[t for t in _text(s, f"sentence {i}").split(" ") if t] for i, s in enumerate(inputs)]


def token_inputs(inputs) -> tuple[list[list[str]], int]:
    """The `tokens` signature's input: {"tokens": [B, T] strings, "sequence_len": [B] ints} -> each row's tokens and
    T; tokens past each row's length are padding, whatever they hold."""
    if not isinstance(inputs, Mapping) or set(inputs) != {"tokens", "sequence_len"}:
        found = sorted(inputs) if isinstance(inputs, Mapping) else type(inputs).__name__
        raise InputError(f"the tokens signature takes a dict with 'tokens' and 'sequence_len', found {found}")
    tokens = np.asarray(inputs["tokens"], dtype=object)
    lengths = np.asarray(inputs["sequence_len"])
    if lengths.size == 0:
        lengths = lengths.astype(np.int64)  # [] is float to numpy; no length is no wrong type
    if tokens.ndim != 2 or lengths.ndim != 1 or lengths.shape[0] != tokens.shape[0]:
        raise InputError(f"'tokens' must be [batch, max_length] and 'sequence_len' [batch], found {list(tokens.shape)} "
                         f"and {list(lengths.shape)}")
    if not np.issubdtype(lengths.dtype, np.integer) or (lengths < 0).any() or (lengths > tokens.shape[1]).any():
        raise InputError(f"'sequence_len' must be integers from 0 to max_length {tokens.shape[1]}, found {lengths.tolist()}")
    rows = [[_text(t, f"token [{b}, {k}]") for k, t in enumerate(row[:n])] for b, (row, n) in enumerate(zip(tokens, lengths))]
    return rows, tokens.shape[1]
