"""ScalarMix: gamma * sum_j softmax(w)_j * layer_j, the task-specific "ELMo" of the paper (eq. 1)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class ScalarMix(nn.Module):
    """A learned, softmax-normalised weighting of N same-shaped tensors, times a scale gamma.

    With `do_layer_norm`, each tensor is first normalised by one mean and variance taken over all
    unmasked positions and dimensions (doc section 5), as AllenNLP does.
    """

    def __init__(self, mixture_size: int, do_layer_norm: bool = False,
                 initial_scalar_parameters: Sequence[float] | None = None, trainable: bool = True):
        super().__init__()
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        if len(initial_scalar_parameters) != mixture_size:
            raise ValueError(
                f"initial_scalar_parameters has {len(initial_scalar_parameters)} values, expected {mixture_size}"
            )
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        self.scalar_parameters = nn.Parameter(torch.tensor([float(v) for v in initial_scalar_parameters]),
                                              requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor([1.0]), requires_grad=trainable)

    def weights(self) -> torch.Tensor:
        """The normalised layer weights s = softmax(w)."""
        return torch.softmax(self.scalar_parameters, dim=0)

    def forward(self, tensors: Sequence[torch.Tensor], mask: torch.Tensor | None = None) -> torch.Tensor:
        if len(tensors) != self.mixture_size:
            raise ValueError(f"ScalarMix expects {self.mixture_size} tensors, found {len(tensors)}")
        s = self.weights()
        if not self.do_layer_norm:
            return self.gamma * sum(w * t for w, t in zip(s, tensors))
        if mask is None:
            raise ValueError("ScalarMix with do_layer_norm=True needs the mask")
        m = mask.unsqueeze(-1).to(tensors[0].dtype)
        count = m.sum() * tensors[0].shape[-1]
        mixed = []
        for w, t in zip(s, tensors):
            tm = t * m
            mean = tm.sum() / count
            var = (((tm - mean) * m) ** 2).sum() / count
            mixed.append(w * (t - mean) / torch.sqrt(var + 1e-13))
        return self.gamma * sum(mixed)
