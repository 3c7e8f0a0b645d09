"""A linear-chain CRF: the forward algorithm for the partition function, and Viterbi decoding.

Written out (about as long as wiring a package in) and tested against brute-force enumeration.
Optional transition constraints (e.g. BIO: I-X only after B-X or I-X) are applied both in training
and decoding, so the model is trained on exactly the distribution it decodes from.
"""

from __future__ import annotations

import torch
from torch import nn

NEG = -1e4  # "impossible" without -inf, so that masked log-sum-exps stay finite


def bio_constraints(labels: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(allowed[from, to], allowed_start[to]) for IOB2 tags: I-X only after B-X or I-X, never first."""
    k = len(labels)
    allowed = torch.ones(k, k, dtype=torch.bool)
    start = torch.ones(k, dtype=torch.bool)
    for j, to in enumerate(labels):
        if to.startswith("I-"):
            start[j] = False
            for i, frm in enumerate(labels):
                allowed[i, j] = frm[2:] == to[2:] and frm[:2] in ("B-", "I-")
    return allowed, start


class CRF(nn.Module):
    """p(y | x) ∝ exp(start[y1] + sum_t emit[t, yt] + sum_t trans[y(t-1), yt] + end[yn])."""

    def __init__(self, num_tags: int, allowed: torch.Tensor | None = None, allowed_start: torch.Tensor | None = None):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))
        allowed = torch.ones(num_tags, num_tags, dtype=torch.bool) if allowed is None else allowed
        allowed_start = torch.ones(num_tags, dtype=torch.bool) if allowed_start is None else allowed_start
        self.register_buffer("allowed", allowed.clone())
        self.register_buffer("allowed_start", allowed_start.clone())
        nn.init.normal_(self.transitions, std=0.1)

    def _trans(self) -> torch.Tensor:
        return self.transitions.masked_fill(~self.allowed, NEG)

    def _start(self) -> torch.Tensor:
        return self.start.masked_fill(~self.allowed_start, NEG)

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z per sentence by the forward algorithm. emissions (B, T, K), mask (B, T), mask[:, 0] true."""
        trans = self._trans()
        alpha = self._start() + emissions[:, 0]  # (B, K)
        for t in range(1, emissions.shape[1]):
            step = torch.logsumexp(alpha.unsqueeze(2) + trans.unsqueeze(0), dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t : t + 1], step, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unnormalised log score of the given tag sequences. tags (B, T)."""
        m = mask.to(emissions.dtype)
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # (B, T)
        total = self._start()[tags[:, 0]] + (emit * m).sum(1)
        trans = self._trans()[tags[:, :-1], tags[:, 1:]]  # (B, T-1)
        total = total + (trans * m[:, 1:]).sum(1)
        last = tags.gather(1, (mask.sum(1, keepdim=True) - 1).long()).squeeze(1)
        return total + self.end[last]

    def neg_log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Sum over the batch of -log p(tags | x)."""
        return (self.log_partition(emissions, mask) - self.score(emissions, tags, mask)).sum()

    @torch.no_grad()
    def viterbi(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The best tag sequence of each sentence (its own length)."""
        trans = self._trans()
        best = self._start() + emissions[:, 0]
        back = []
        for t in range(1, emissions.shape[1]):
            scores = best.unsqueeze(2) + trans.unsqueeze(0)  # (B, from, to)
            top, arg = scores.max(dim=1)
            best = torch.where(mask[:, t : t + 1], top + emissions[:, t], best)
            back.append(arg)
        best = best + self.end
        lengths = mask.sum(1).tolist()
        paths = []
        for b, n in enumerate(lengths):
            tag = int(best[b].argmax())
            path = [tag]
            for t in range(int(n) - 1, 0, -1):
                tag = int(back[t - 1][b, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths
