"""ScalarMix: gamma * sum_j softmax(w)_j * layer_j, the task-specific "ELMo" of the paper (eq. 1)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from elmo.errors import InputError


class ScalarMix(nn.Module):
    """A learned, softmax-normalised weighting of N same-shaped tensors, times a scale gamma.

    With `do_layer_norm`, each tensor is first normalised by one mean and variance taken over all
    unmasked positions and dimensions (doc section 5), as AllenNLP does.

    The parameters have AllenNLP's layout and names, so its code and checkpoints work unchanged:
    `scalar_parameters` is a ParameterList of N one-element Parameters (state_dict keys
    `scalar_parameters.0` ... `scalar_parameters.{N-1}`) and `gamma` is one (1,) Parameter.
    Checkpoints saved before this layout, with one (N,) `scalar_parameters`, still load.
    """

    def __init__(self, mixture_size: int, do_layer_norm: bool = False,
                 initial_scalar_parameters: Sequence[float] | None = None, trainable: bool = True):
        super().__init__()
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        if len(initial_scalar_parameters) != mixture_size:
            raise InputError(
                f"initial_scalar_parameters has {len(initial_scalar_parameters)} values, expected {mixture_size}"
            )
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        self.scalar_parameters = nn.ParameterList(
            nn.Parameter(torch.tensor([float(v)]), requires_grad=trainable) for v in initial_scalar_parameters
        )
        self.gamma = nn.Parameter(torch.tensor([1.0]), requires_grad=trainable)

    def raw_weights(self) -> torch.Tensor:
        """The pre-softmax weights w as one (N,) tensor (differentiable)."""
        return torch.cat(list(self.scalar_parameters))

    def weights(self) -> torch.Tensor:
        """The normalised layer weights s = softmax(w)."""
        return torch.softmax(self.raw_weights(), dim=0)

    def forward(self, tensors: Sequence[torch.Tensor], mask: torch.Tensor | None = None) -> torch.Tensor:
        if len(tensors) != self.mixture_size:
            raise InputError(f"ScalarMix expects {self.mixture_size} tensors, found {len(tensors)}")
        s = self.weights()
        if not self.do_layer_norm:
            return self.gamma * sum(w * t for w, t in zip(s, tensors))
        if mask is None:
            raise InputError("ScalarMix with do_layer_norm=True needs the mask")
        m = mask.unsqueeze(-1).to(tensors[0].dtype)
        count = m.sum() * tensors[0].shape[-1]
        mixed = []
        for w, t in zip(s, tensors):
            tm = t * m
            mean = tm.sum() / count
            var = (((tm - mean) * m) ** 2).sum() / count
            mixed.append(w * (t - mean) / torch.sqrt(var + 1e-13))
        return self.gamma * sum(mixed)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Also accept the earlier layout, one (N,) tensor under `scalar_parameters`, so task models
        saved before the switch to AllenNLP's layout keep loading."""
        old = state_dict.get(prefix + "scalar_parameters")
        if isinstance(old, torch.Tensor) and old.dim() == 1 and old.numel() == self.mixture_size:
            del state_dict[prefix + "scalar_parameters"]
            for k, value in enumerate(old):
                state_dict[f"{prefix}scalar_parameters.{k}"] = value.reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
