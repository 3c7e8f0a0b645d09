"""The output softmax shared by both LMs: full, and TF's sampled softmax (doc section 7).

The sampled loss is what `tf.nn.sampled_softmax_loss` computes with its defaults: one set of
distinct negatives per call from a log-uniform sampler over the frequency-sorted vocabulary, every
logit corrected by minus log(expected count), and a negative equal to a position's target removed
from that position's softmax.
"""

from __future__ import annotations

import math
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModelFileError
from ..fileio import atomic_path


class Softmax(nn.Module):
    """W (V, P) and b (V,), initialised as bilm-tf does (normal, std 1/sqrt(P); zeros)."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.W = nn.Parameter(torch.empty(vocab_size, dim))
        self.b = nn.Parameter(torch.zeros(vocab_size))
        with torch.no_grad():
            nn.init.normal_(self.W, std=1.0 / math.sqrt(dim))

    def full_nll(self, h: torch.Tensor, targets: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        """-log p(target | h) over the whole vocabulary, per row. Without grad, rows go in chunks."""
        if not torch.is_grad_enabled() and h.shape[0] > chunk:
            return torch.cat([self.full_nll(a, b, chunk) for a, b in zip(h.split(chunk), targets.split(chunk))])
        logits = F.linear(h, self.W, self.b).float()
        return F.cross_entropy(logits, targets, reduction="none")

    def sampled_nll(self, h: torch.Tensor, targets: torch.Tensor, sample: Sample) -> torch.Tensor:
        """Per-row loss over [true class, sampled classes] logits, log-Q corrected, accidental hits removed."""
        true_logit = (h * self.W[targets]).sum(-1).float() + self.b[targets] - sample.log_expected(targets)
        sampled_logits = F.linear(h, self.W[sample.ids], self.b[sample.ids]).float() - sample.log_expected_ids
        rows, cols = sample.hits(targets)
        sampled_logits.index_put_((rows, cols), sampled_logits.new_tensor(float("-inf")))
        return torch.logaddexp(torch.logsumexp(sampled_logits, dim=1), true_logit) - true_logit


class Sample:
    """Distinct sampled ids and what the log-Q correction needs (TF's `ExpectedCountHelper`)."""

    def __init__(self, ids: torch.Tensor, num_tries: int, vocab_size: int):
        self.ids, self.num_tries, self.vocab_size = ids, num_tries, vocab_size
        self.log_expected_ids = self.log_expected(ids)

    def hits(self, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, column) of every sampled id equal to its row's target, found by binary search."""
        ordered, order = self.ids.sort()
        pos = torch.searchsorted(ordered, targets).clamp_(max=len(ordered) - 1)
        rows = torch.nonzero(ordered[pos] == targets).squeeze(1)
        return rows, order[pos[rows]]

    def log_expected(self, ids: torch.Tensor) -> torch.Tensor:
        """log of the expected count of each id in the sample: num_tries draws, rejections included."""
        k = ids.double()
        p = (torch.log(k + 2) - torch.log(k + 1)) / math.log(self.vocab_size + 1)
        n = len(self.ids)
        count = p * n if self.num_tries == n else -torch.expm1(self.num_tries * torch.log1p(-p))
        return torch.log(count).float()


class LogUniformSampler:
    """TF's `log_uniform_candidate_sampler(unique=True)`: P(k) = log((k+2)/(k+1)) / log(V+1).

    Draws until `num_sampled` distinct ids have appeared and remembers how many draws that took.
    """

    def __init__(self, vocab_size: int, num_sampled: int, generator: torch.Generator):
        if num_sampled >= vocab_size:
            raise ValueError(f"cannot sample {num_sampled} distinct negatives from {vocab_size} classes")
        self.vocab_size, self.num_sampled, self.generator = vocab_size, num_sampled, generator

    def draw(self, n: int) -> torch.Tensor:
        u = torch.rand(n, generator=self.generator, dtype=torch.float64)
        ids = torch.floor(torch.exp(u * math.log(self.vocab_size + 1))).long() - 1
        return ids.clamp_(0, self.vocab_size - 1)

    def sample(self, device: torch.device | str = "cpu") -> Sample:
        draws = self.draw(2 * self.num_sampled)
        while True:
            unique, inverse = torch.unique(draws, return_inverse=True)
            if len(unique) >= self.num_sampled:
                break
            draws = torch.cat([draws, self.draw(2 * self.num_sampled)])
        first = torch.full((len(unique),), len(draws), dtype=torch.long)
        first = first.scatter_reduce(0, inverse, torch.arange(len(draws)), "amin")
        firsts = first.sort().values[: self.num_sampled]
        return Sample(draws[firsts].to(device), int(firsts[-1]) + 1, self.vocab_size)


def save_softmax(softmax: Softmax, path: str | os.PathLike, float16: bool = False) -> None:
    """softmax.hdf5: datasets W (V, P) and b (V,); W optionally float16 to halve the file."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("W", data=softmax.W.detach().cpu().numpy().astype(np.float16 if float16 else np.float32))
        f.create_dataset("b", data=softmax.b.detach().cpu().float().numpy())


def load_softmax(path: str | os.PathLike, vocab_size: int, dim: int) -> Softmax:
    """Read softmax.hdf5 and check its shape against the vocabulary and the model's projection size."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelFileError(f"{path}: softmax file not found")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ModelFileError(f"{path}: not an HDF5 softmax file ({e})") from None
    with f:
        for name in ("W", "b"):
            if name not in f:
                raise ModelFileError(f"{path}: missing dataset '{name}' (expected W (vocab, dim) and b (vocab,))")
        w, b = f["W"][...], f["b"][...]
    if w.shape != (vocab_size, dim) or b.shape != (vocab_size,):
        raise ModelFileError(
            f"{path}: W has shape {w.shape} and b {b.shape}, expected ({vocab_size}, {dim}) and ({vocab_size},) "
            "for this vocabulary and model; is it the vocab.txt the model was trained with?"
        )
    softmax = Softmax(vocab_size, dim)
    with torch.no_grad():
        softmax.W.copy_(torch.from_numpy(w.astype(np.float32)))
        softmax.b.copy_(torch.from_numpy(b.astype(np.float32)))
    return softmax
