"""`Elmo`: the module users drop into their models, with AllenNLP's constructor and forward."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn

from .bilm import BiLM, remove_sentence_boundaries
from .scalar_mix import ScalarMix
from .weights import load_bilm


class Elmo(nn.Module):
    """Frozen (or fine-tuned) biLM plus `num_output_representations` scalar mixes of its layers.

    Differences from AllenNLP, on purpose: stateless by default (`stateful=True` restores the
    original per-row state carrying), and models without skip connections load.
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
        module: BiLM | None = None,
        stateful: bool = False,
    ):
        super().__init__()
        if module is None:
            if options_file is None:
                raise ValueError("Elmo needs options_file and weight_file, or module=")
            module = load_bilm(options_file, weight_file, stateful=stateful)
        self._elmo_lstm = module
        for p in self._elmo_lstm.parameters():
            p.requires_grad_(requires_grad)
        self._keep_sentence_boundaries = keep_sentence_boundaries
        self._dropout = nn.Dropout(p=dropout)
        self._scalar_mixes = nn.ModuleList(
            ScalarMix(
                module.num_layers,
                do_layer_norm=do_layer_norm,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            for _ in range(num_output_representations)
        )
        self._word_cache: torch.Tensor | None = None
        if vocab_to_cache is not None:
            self._word_cache = nn.Parameter(self._compute_word_cache(list(vocab_to_cache)), requires_grad=False)

    @classmethod
    def from_pretrained(cls, name: str = "default", num_output_representations: int = 1, **kwargs) -> Elmo:
        """An `Elmo` on a bundled model or a model directory (options.json + weights.hdf5, or an
        ELMoForManyLangs directory: then build its inputs with `elmo.batch_to_ids(sentences)`)."""
        from .models import load_model

        module = load_model(name, stateful=kwargs.pop("stateful", False))
        return cls(None, None, num_output_representations, module=module, **kwargs)

    @property
    def bilm(self) -> BiLM:
        return self._elmo_lstm

    @property
    def scalar_mixes(self) -> nn.ModuleList:
        return self._scalar_mixes

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """Input ids for this model: `elmo.batch_to_ids` for the original models, the model's own
        lexicon for ELMoForManyLangs ones (whose ids `elmo.batch_to_ids` does not make)."""
        return self._elmo_lstm.batch_to_ids(sentences)

    def get_output_dim(self) -> int:
        return self._elmo_lstm.output_dim()

    def reset_states(self) -> None:
        self._elmo_lstm.reset_states()

    @torch.no_grad()
    def _compute_word_cache(self, words: list[str], chunk: int = 1024) -> torch.Tensor:
        ids = self._elmo_lstm.batch_to_ids([[w] for w in words])[:, 0]
        vectors = self._elmo_lstm.char_encoder(ids, chunk=chunk) if len(words) else ids.new_zeros(0, 0).float()
        if len(words):
            vectors[0] = 0.0  # index 0 is padding, as in an AllenNLP vocabulary
        return vectors

    def forward(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None = None) -> dict:
        """inputs: char ids (B, T, 50) or (B, N, T, 50); word_inputs: (B, T) indices into
        `vocab_to_cache`. Returns {'elmo_representations': [(B, T, 2P)...], 'mask': (B, T)}."""
        original_shape = inputs.shape
        if inputs.dim() > 3:
            inputs = inputs.reshape(-1, *original_shape[-2:])
        if word_inputs is not None and word_inputs.dim() > 2:
            word_inputs = word_inputs.reshape(-1, word_inputs.shape[-1])
        if word_inputs is not None and self._word_cache is not None:
            mask = word_inputs > 0
            out = self._elmo_lstm(token_vectors=self._word_cache[word_inputs], mask=mask)
        else:
            out = self._elmo_lstm(inputs)
        representations = []
        for mix in self._scalar_mixes:
            mixed = mix(out.layers, out.mask)
            if self._keep_sentence_boundaries:
                rep, mask = mixed, out.mask
            else:
                rep, mask = remove_sentence_boundaries(mixed, out.mask)
            representations.append(self._dropout(rep))
        if not self._scalar_mixes:
            mask = out.mask if self._keep_sentence_boundaries else remove_sentence_boundaries(out.layers[0], out.mask)[1]
        if len(original_shape) > 3:
            lead = original_shape[:-2]
            representations = [r.view(*lead, r.shape[-2], r.shape[-1]) for r in representations]
            mask = mask.view(*lead, mask.shape[-1])
        return {"elmo_representations": representations, "mask": mask}
