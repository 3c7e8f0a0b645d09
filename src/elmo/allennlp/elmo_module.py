"""`Elmo`: the module users drop into their models, with AllenNLP's constructor and forward."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from elmo.errors import InputError
from elmo.formats import allennlp_state
from elmo.model.bilm import BiLM
from elmo.model.boundaries import remove_sentence_boundaries
from elmo.model.chars import N_CODES
from elmo.model.int8 import quantize_bilm
from elmo.model.scalar_mix import ScalarMix
from elmo.models import load_bilm, resolve

logger = logging.getLogger(__name__)
# AllenNLP's words, logged as it logs them when word ids come without a vocabulary cache (they are then ignored)
UNCACHED_WORD_INPUTS = "Word inputs were passed to ELMo but it does not have a cached vocab."
MAX_REPRESENTATIONS = 1000  # far above any task's need; 10**6 mixes took two minutes and 7.6 GB to build


def check_arguments(num_output_representations: object, dropout: object, scalar_mix_parameters: object) -> None:
    """Elmo's numbers in range, each refusal naming the argument, the value and what is allowed."""
    n = num_output_representations
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_REPRESENTATIONS:
        raise InputError(f"num_output_representations must be an integer in 0..{MAX_REPRESENTATIONS}, found {n!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
        raise InputError(f"dropout must be a number in [0, 1], found {dropout!r}")
    if scalar_mix_parameters is not None:
        values = list(scalar_mix_parameters)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise InputError(f"scalar_mix_parameters must be finite numbers, found {values!r}")


ID_DTYPES = (torch.int64, torch.int32)


def check_word_ids(word_inputs: object, inputs: torch.Tensor) -> None:
    """`word_inputs` where they are used (a vocabulary cache): integer word ids >= 0, (B, T) or (B, N, T) beside char
    ids of (B, T, W) or (B, N, T, W)."""
    if not isinstance(word_inputs, torch.Tensor) or word_inputs.dtype not in ID_DTYPES:
        found = word_inputs.dtype if isinstance(word_inputs, torch.Tensor) else type(word_inputs).__name__
        raise InputError(f"word_inputs must be an int64 tensor of word ids (indices into vocab_to_cache), found {found}")
    if word_inputs.dim() != inputs.dim() - 1 or word_inputs.shape[0] != inputs.shape[0]:
        raise InputError(f"word_inputs must hold one id per token, shape (batch, tokens) for inputs of shape "
                         f"{tuple(inputs.shape)}, found {tuple(word_inputs.shape)}")
    if word_inputs.numel() and int(word_inputs.min()) < 0:
        raise InputError(f"word_inputs hold word id {int(word_inputs.min())}; ids are 0 (padding) or a row of "
                         f"vocab_to_cache (ids beyond it go through the character CNN)")


def check_char_ids(inputs: object, module: nn.Module) -> None:
    """Character ids as `batch_to_ids` makes them: an integer tensor (B, T, W) or (B, N, T, W), W the model's
    width, values in 0..codes; a float, a wrong shape or an id out of range is refused by name."""
    if not isinstance(inputs, torch.Tensor):
        raise InputError(f"inputs must be a tensor of character ids (elmo.batch_to_ids), found {type(inputs).__name__}")
    if inputs.dtype not in ID_DTYPES:  # torch's embeddings index with int64 or int32 only
        raise InputError(f"inputs must hold int64 (or int32) character ids (elmo.batch_to_ids gives int64), found "
                         f"{inputs.dtype}")
    config = getattr(module, "config", None)
    width = config.ids_width if config is not None else None
    if inputs.dim() not in (3, 4) or (width is not None and inputs.shape[-1] != width):
        raise InputError(f"inputs must have shape (batch, tokens, {width or 'W'}) or (batch, n, tokens, "
                         f"{width or 'W'}), found {tuple(inputs.shape)}")
    if 0 in inputs.shape[:-2]:
        raise InputError(f"inputs hold no sentences (shape {tuple(inputs.shape)}); give at least one "
                         f"(elmo.batch_to_ids of a non-empty list)")
    if config is not None and config.reads_chars and not config.word_dim and inputs.numel():
        low, high = int(inputs.min()), int(inputs.max())
        if low < 0 or high > N_CODES:
            raise InputError(f"inputs hold character id {low if low < 0 else high}; ids are 0 (padding) to {N_CODES}")


class Elmo(nn.Module):
    """Frozen (or fine-tuned) biLM plus `num_output_representations` scalar mixes of its layers.

    Differences from AllenNLP, on purpose: stateless by default (`stateful=True` restores the
    original per-row state carrying), and models without skip connections load.

    `state_dict()` has AllenNLP's keys and layouts (`scalar_mix_0.scalar_parameters.0`,
    `_elmo_lstm._token_embedder.char_conv_0.weight`, ...), and `load_state_dict` takes them, so a
    task model's checkpoint moves between the two packages; see `allennlp_state`. State_dicts saved
    by earlier versions of this class, in the biLM's own layout, still load. Because most entries
    are converted copies, `state_dict(keep_vars=True)` returns tensors, not the Parameters, for them.

    `module=` takes a `BiLM` or, as in AllenNLP, any module with `num_layers` whose
    forward(inputs, word_inputs) returns {'activations': [...], 'mask': ...}.
    """

    def __init__(
        self,
        options_file: str | os.PathLike | None,
        weight_file: str | os.PathLike | None,
        num_output_representations: int,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Sequence[str] | None = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Sequence[float] | None = None,
        module: nn.Module | None = None,
        stateful: bool = False,
        int8: bool = False,
    ):
        """`int8=True`: the frozen biLM's products run in int8 on the CPU (`elmo.model.int8`; the scalar
        mixes stay float32 and trainable); not with `requires_grad=True`."""
        super().__init__()
        check_arguments(num_output_representations, dropout, scalar_mix_parameters)
        if int8 and requires_grad:
            raise InputError("Elmo(int8=True) is for a frozen biLM: int8 weights take no gradients; "
                             "drop requires_grad=True or int8=True")
        if module is None:
            if options_file is None:
                raise InputError("Elmo needs options_file and weight_file, or module=")
            module = load_bilm(options_file, weight_file, stateful=stateful)
        self._elmo_lstm = module
        for p in self._elmo_lstm.parameters():
            p.requires_grad_(requires_grad)
        if int8:
            if not isinstance(module, BiLM):
                raise InputError(f"Elmo(int8=True) converts this package's BiLM, found module={type(module).__name__}")
            quantize_bilm(module)
        self._keep_sentence_boundaries = keep_sentence_boundaries
        self._dropout = nn.Dropout(p=dropout)
        self._scalar_mixes: list[ScalarMix] = []
        for k in range(num_output_representations):  # registered under AllenNLP's names
            mix = ScalarMix(
                module.num_layers,
                do_layer_norm=do_layer_norm,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            self.add_module(f"scalar_mix_{k}", mix)
            self._scalar_mixes.append(mix)
        self._word_cache: torch.Tensor | None = None
        if vocab_to_cache is not None:
            self._word_cache = nn.Parameter(self._compute_word_cache(list(vocab_to_cache)), requires_grad=False)
        self._register_state_dict_hook(_state_dict_to_allennlp)

    @classmethod
    def from_pretrained(cls, name: str = "default", num_output_representations: int = 1, **kwargs) -> Elmo:
        """An `Elmo` on a bundled model or a model directory (options.json + weights.hdf5, or an
        ELMoForManyLangs directory: then build its inputs with `elmo.batch_to_ids(sentences)`)."""
        module = resolve(name).load(stateful=kwargs.pop("stateful", False))
        return cls(None, None, num_output_representations, module=module, **kwargs)

    @property
    def bilm(self) -> BiLM:
        return self._elmo_lstm

    @property
    def scalar_mixes(self) -> list[ScalarMix]:
        return list(self._scalar_mixes)

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """Input ids for this model: `elmo.batch_to_ids` for the original models, the model's own
        lexicon for ELMoForManyLangs ones (whose ids `elmo.batch_to_ids` does not make)."""
        return self._elmo_lstm.batch_to_ids(sentences)

    def get_output_dim(self) -> int:
        if isinstance(self._elmo_lstm, BiLM):
            return self._elmo_lstm.output_dim()
        return self._elmo_lstm.get_output_dim()  # AllenNLP's contract for a given module

    def reset_states(self) -> None:
        if hasattr(self._elmo_lstm, "reset_states"):
            self._elmo_lstm.reset_states()

    @torch.no_grad()
    def _compute_word_cache(self, words: list[str], chunk: int = 1024) -> torch.Tensor:
        ids = self._elmo_lstm.batch_to_ids([[w] for w in words])[:, 0]
        vectors = self._elmo_lstm.char_encoder(ids, chunk=chunk) if len(words) else ids.new_zeros(0, 0).float()
        if len(words):
            vectors[0] = 0.0  # index 0 is padding, as in an AllenNLP vocabulary
        return vectors

    def _cached_token_vectors(self, char_ids: torch.Tensor, word_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Token vectors (B, T, P) looked up in the vocabulary cache; words with an index beyond it
        (not cached) go through the character CNN instead, as AllenNLP falls back for them."""
        cache = self._word_cache
        uncached = mask & (word_ids >= cache.shape[0])
        if cache.shape[0]:
            vectors = cache[torch.where(uncached, 0, word_ids).clamp(min=0)]
        else:
            vectors = cache.new_zeros(*word_ids.shape, self._elmo_lstm.config.projection_dim)
        if not uncached.any():
            return vectors
        if char_ids.shape[:2] != word_ids.shape:
            raise InputError(f"word ids {tuple(word_ids.shape)} include words beyond the {cache.shape[0]} cached ones, "
                             f"which need their character ids, but the character ids have shape {tuple(char_ids.shape)}")
        return torch.where(uncached.unsqueeze(-1), self._elmo_lstm.token_vectors(char_ids, uncached), vectors)

    def _allennlp_rules(self) -> list[allennlp_state.Rule]:
        if not isinstance(self._elmo_lstm, BiLM):  # a user's own module: its keys stay its own
            return []
        return allennlp_state.elmo_rules(self._elmo_lstm, has_word_cache=self._word_cache is not None)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """torch's, all or nothing: a non-finite tensor is refused, and a load that fails (a missing or
        misshapen key under strict=True) leaves every weight as it was, not half replaced."""
        if not isinstance(state_dict, Mapping):
            raise InputError(f"state_dict must be a mapping of parameter names to tensors, found "
                             f"{type(state_dict).__name__}")
        floats_only = all(t.is_floating_point() for t in self._tensors().values())
        for name, value in state_dict.items():
            if not isinstance(name, str):
                raise InputError(f"state_dict's keys must be parameter names (str), found {type(name).__name__} "
                                 f"{name!r}; nothing was loaded")
            if not isinstance(value, torch.Tensor):
                raise InputError(f"state_dict['{name}'] must be a tensor, found {type(value).__name__}; nothing was "
                                 f"loaded")
            if floats_only and not value.is_floating_point():
                raise InputError(f"state_dict['{name}'] holds {value.dtype}; this module's weights are floats, "
                                 f"nothing was loaded")
            if value.is_floating_point() and not torch.isfinite(value).all():
                raise InputError(f"state_dict['{name}'] holds NaN or infinite values; nothing was loaded")
        before = {k: v.detach().clone() for k, v in self._tensors().items()}
        try:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        except Exception:
            with torch.no_grad():
                for k, v in self._tensors().items():
                    if k in before and v.shape == before[k].shape:
                        v.copy_(before[k])
            raise

    def _tensors(self) -> dict[str, torch.Tensor]:
        return dict(self.named_parameters(remove_duplicate=False)) | dict(self.named_buffers())

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """Take AllenNLP's keys and layouts (or this class's earlier ones) by converting them to the
        biLM's before the submodules load; see `allennlp_state`."""
        for k in range(len(self._scalar_mixes)):  # the earlier name of the mixes
            old = f"{prefix}_scalar_mixes.{k}."
            for key in [key for key in state_dict if key.startswith(old)]:
                state_dict[f"{prefix}scalar_mix_{k}.{key[len(old):]}"] = state_dict.pop(key)
        rules = self._allennlp_rules()
        params = dict(self.named_parameters())
        expected = allennlp_state.allennlp_shapes(rules, params)
        allennlp_state.from_allennlp(state_dict, prefix, rules, expected, error_msgs)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _run_bilm(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None) -> tuple[list[torch.Tensor], torch.Tensor]:
        """All layers with the markers, and their mask. A `module=` other than a `BiLM` is called as
        AllenNLP calls one, module(inputs, word_inputs), and returns {'activations', 'mask'}."""
        if not isinstance(self._elmo_lstm, BiLM):
            out = self._elmo_lstm(inputs, word_inputs)
            return (out["activations"], out["mask"]) if isinstance(out, dict) else (out.layers, out.mask)
        if word_inputs is not None and self._word_cache is not None:
            mask = word_inputs > 0
            out = self._elmo_lstm(token_vectors=self._cached_token_vectors(inputs, word_inputs, mask), mask=mask)
        else:
            out = self._elmo_lstm(inputs)
        return out.layers, out.mask

    def _usable_word_ids(self, word_inputs: object, inputs: torch.Tensor) -> torch.Tensor | None:
        """The word ids the biLM will use: None without a vocabulary cache (ignored with AllenNLP's warning, as
        AllenNLP ignores them), else checked (`check_word_ids`) and flattened to (B*N, T) for 4-D inputs."""
        if word_inputs is None:
            return None
        if self._word_cache is None:
            logger.warning(UNCACHED_WORD_INPUTS)
            return None
        check_word_ids(word_inputs, inputs)
        return word_inputs.reshape(-1, word_inputs.shape[-1]) if word_inputs.dim() > 2 else word_inputs

    def _layers(self, inputs: torch.Tensor, word_inputs: object) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Checked ids -> every layer with the sentence markers and their mask, 4-D inputs flattened to (B*N, ...)."""
        check_char_ids(inputs, self._elmo_lstm)
        word_ids = self._usable_word_ids(word_inputs, inputs)
        if inputs.dim() > 3:
            inputs = inputs.reshape(-1, *inputs.shape[-2:])
        return self._run_bilm(inputs, word_ids)

    def bilm_outputs(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None = None) -> dict:
        """What AllenNLP's `_ElmoBiLm` returns: {'activations': every layer with the sentence markers, each
        (B, T+2, 2P), 'mask': (B, T+2)}; ids as in `forward` (4-D inputs come back as (B*N, ...))."""
        layers, mask = self._layers(inputs, word_inputs)
        return {"activations": layers, "mask": mask}

    def forward(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None = None) -> dict:
        """inputs: char ids (B, T, 50) or (B, N, T, 50); word_inputs: (B, T) indices into
        `vocab_to_cache` (ignored, with AllenNLP's warning, when there is none).
        Returns {'elmo_representations': [(B, T, 2P)...], 'mask': (B, T)}."""
        original_shape = inputs.shape if isinstance(inputs, torch.Tensor) else None
        layers, bilm_mask = self._layers(inputs, word_inputs)
        representations = []
        for mix in self._scalar_mixes:
            mixed = mix(layers, bilm_mask)
            if self._keep_sentence_boundaries:
                rep, mask = mixed, bilm_mask
            else:
                rep, mask = remove_sentence_boundaries(mixed, bilm_mask)
            representations.append(self._dropout(rep))
        if not self._scalar_mixes:
            mask = bilm_mask if self._keep_sentence_boundaries else remove_sentence_boundaries(layers[0], bilm_mask)[1]
        if len(original_shape) > 3:
            lead = original_shape[:-2]
            representations = [r.view(*lead, r.shape[-2], r.shape[-1]) for r in representations]
            mask = mask.view(*lead, mask.shape[-1])
        return {"elmo_representations": representations, "mask": mask}


def _state_dict_to_allennlp(module: Elmo, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    """state_dict hook: the biLM's entries in AllenNLP's keys and layouts (see `allennlp_state`)."""
    allennlp_state.to_allennlp(state_dict, prefix, module._allennlp_rules())
