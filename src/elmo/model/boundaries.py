"""Where sentences start and end in a padded batch: the <S>/</S> markers added and removed, and the
backward direction's per-row reversal (each row's real steps reversed, its padding left in place).
"""

from __future__ import annotations

import torch


def add_sentence_boundaries(
    x: torch.Tensor, mask: torch.Tensor, bos: torch.Tensor, eos: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Insert `bos` before and `eos` right after each row's tokens: (B, T, ...) -> (B, T+2, ...)."""
    batch, steps = mask.shape
    lengths = mask.sum(1)
    out = x.new_zeros((batch, steps + 2) + tuple(x.shape[2:]))
    out[:, 1 : steps + 1] = x
    out[:, 0] = bos
    out[torch.arange(batch, device=x.device), lengths + 1] = eos.to(out.dtype)
    new_mask = torch.arange(steps + 2, device=mask.device).unsqueeze(0) < (lengths + 2).unsqueeze(1)
    return out, new_mask


def remove_sentence_boundaries(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the first and each row's last valid position: (B, T+2, ...) -> (B, T, ...) and mask."""
    lengths = mask.sum(1) - 2
    steps = x.shape[1] - 2
    new_mask = torch.arange(steps, device=mask.device).unsqueeze(0) < lengths.unsqueeze(1)
    out = x[:, 1 : steps + 1] * new_mask.view(new_mask.shape + (1,) * (x.dim() - 2)).to(x.dtype)
    return out, new_mask


def reverse_index(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """Index (B, T) that reverses each row's first lengths[b] steps and leaves padding in place."""
    t = torch.arange(steps, device=lengths.device).unsqueeze(0)
    rev = lengths.unsqueeze(1) - 1 - t
    return torch.where(rev >= 0, rev, t)


def join_directions(f: torch.Tensor, b: torch.Tensor, rev: torch.Tensor) -> torch.Tensor:
    """[f, b with each row's steps put back in order] (B, T, 2P); without autograd, b is gathered
    straight into its half of the result (no (B, T, P) copy between)."""
    index = rev.unsqueeze(-1).expand_as(b)
    if torch.is_grad_enabled() or f.dtype != b.dtype:
        return torch.cat([f, torch.gather(b, 1, index)], dim=-1)
    both = f.new_empty(f.shape[:-1] + (2 * f.shape[-1],))
    both[..., : f.shape[-1]] = f
    torch.gather(b, 1, index, out=both[..., f.shape[-1] :])
    return both
