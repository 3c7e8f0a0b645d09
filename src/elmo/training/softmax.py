"""The output softmax shared by both LMs: full, and TF's sampled softmax (docs/format.md section 7).

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

from elmo.errors import ElmoError, ModelFileError, ModelFileNotFound
from elmo.files.fileio import atomic_path
from elmo.files.hdf5_files import open_hdf5


class Softmax(nn.Module):
    """W (V, P) and b (V,), initialised as bilm-tf does (normal, std 1/sqrt(P); zeros).

    `sparse_grad`: the sampled loss gives W a sparse gradient holding only the rows it read (the
    targets and the negatives), as TensorFlow's IndexedSlices did for bilm-tf: Adagrad and SGD then
    update, and DDP all-reduces, those rows only, instead of passes over all V x P. The full loss
    always gives a dense one.
    """

    def __init__(self, vocab_size: int, dim: int, sparse_grad: bool = False):
        super().__init__()
        self.sparse_grad = sparse_grad
        self.W = nn.Parameter(torch.empty(vocab_size, dim))
        self.b = nn.Parameter(torch.zeros(vocab_size))
        with torch.no_grad():
            nn.init.normal_(self.W, std=1.0 / math.sqrt(dim))

    def full_nll(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """-log p(target | h) over the whole vocabulary, per row."""
        return softmax_nll(h, self.W, self.b, targets=targets)

    def sampled_nll(self, h: torch.Tensor, targets: torch.Tensor, sample: Sample) -> torch.Tensor:
        """Per-row loss over [true class, sampled classes] logits, log-Q corrected, accidental hits removed."""
        true_logit = (h * self.rows(targets)).sum(-1).float() + self.b[targets] - sample.log_expected(targets)
        rows, cols = sample.hits(targets)
        sampled_bias = self.b[sample.ids] - sample.log_expected_ids
        return softmax_nll(h, self.rows(sample.ids), sampled_bias, extra=true_logit, hits=(rows, cols))

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.W, sparse=self.sparse_grad)


def softmax_nll(h: torch.Tensor, W: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor | None = None,
                extra: torch.Tensor | None = None, hits: tuple[torch.Tensor, torch.Tensor] | None = None,
                chunk_bytes: int = 1 << 26) -> torch.Tensor:
    """Per row r, logsumexp over the logits h_r . W_c + bias_c minus the target's logit.

    The target is either a column (`targets`) or one `extra` logit per row that joins the softmax
    (the sampled softmax's true class); `hits` (rows, columns) are left out of the softmax. Same value
    and gradients as the plain autograd expression, but the logits become their own gradient in place
    in the forward pass, where autograd would make half a dozen passes over the (rows x columns)
    matrix: at small P (the `tiny` preset) those passes cost more than the GEMMs. Rows go in chunks of
    at most `chunk_bytes` of logits, which bounds the memory of evaluation (no gradient kept).
    Under autocast the three GEMMs run in its dtype (bfloat16) and the softmax in float32.
    """
    if (targets is None) == (extra is None):
        raise ValueError("softmax_nll takes exactly one of targets= and extra=")
    rows = max(16, chunk_bytes // max(1, W.shape[0] * h.element_size()))
    hit_rows, hit_cols = hits if hits is not None else (None, None)
    low = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else None
    return _SoftmaxNLL.apply(h, W, bias, extra, targets, hit_rows, hit_cols, rows, low)


class _SoftmaxNLL(torch.autograd.Function):
    """`softmax_nll`'s computation: forward keeps G = d nll / d logits and G @ W; backward is two GEMMs."""

    @staticmethod
    def forward(ctx, h, W, bias, extra, targets, hit_rows, hit_cols, rows, low):
        n = h.shape[0]
        keep = any(ctx.needs_input_grad[:4])
        exact = torch.promote_types(h.dtype, W.dtype) if low is None else torch.float32  # the softmax's dtype
        if low is not None:
            h, W = h.to(low), W.to(low)
        grads = h.new_empty(n if keep else min(n, rows), W.shape[0], dtype=exact)  # logits, then d nll / d logits
        nll = h.new_empty(n, dtype=exact)
        extra_grad = h.new_empty(n, dtype=exact) if extra is not None else None
        gw = h.new_empty(n, W.shape[1]) if ctx.needs_input_grad[0] else None
        if hit_rows is not None:
            hit_rows, order = hit_rows.sort()
            hit_cols = hit_cols[order]
        for start in range(0, n, rows):
            end = min(n, start + rows)
            z = grads[start:end] if keep else grads[: end - start]
            if low is None:
                torch.addmm(bias, h[start:end], W.t(), out=z)
            else:
                z.copy_(torch.mm(h[start:end], W.t())).add_(bias)
            if hit_rows is not None:
                lo, hi = torch.searchsorted(hit_rows, torch.tensor([start, end], device=hit_rows.device)).tolist()
                z[hit_rows[lo:hi] - start, hit_cols[lo:hi]] = float("-inf")
            if extra is not None:
                picked = extra[start:end]
                top = torch.maximum(z.amax(1), picked)
            else:
                picked = z.gather(1, targets[start:end, None]).squeeze(1)
                top = z.amax(1)
            z.sub_(top[:, None]).exp_()
            total = z.sum(1)
            if extra is not None:
                extra_exp = (picked - top).exp()
                total += extra_exp
            nll[start:end] = total.log() + top - picked
            if keep:
                z.div_(total[:, None])
                if extra is not None:
                    extra_grad[start:end] = extra_exp / total - 1.0
                else:
                    z[torch.arange(end - start, device=z.device), targets[start:end]] -= 1.0
                if gw is not None:
                    torch.mm(z.to(W.dtype), W, out=gw[start:end])
        if keep:
            ctx.save_for_backward(h, grads, gw, extra_grad)
        return nll

    @staticmethod
    def backward(ctx, grad_nll):
        h, grads, gw, extra_grad = ctx.saved_tensors
        need_h, need_w, need_bias, need_extra = ctx.needs_input_grad[:4]
        grad_h = gw * grad_nll[:, None] if need_h else None
        grad_w = grads.to(h.dtype).t() @ (h * grad_nll[:, None].to(h.dtype)) if need_w else None
        grad_bias = grads.t() @ grad_nll.to(grads.dtype) if need_bias else None
        grad_extra = extra_grad * grad_nll if need_extra else None
        return grad_h, grad_w, grad_bias, grad_extra, None, None, None, None, None


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
        raise ModelFileNotFound(f"{path}: softmax file not found")
    f = open_hdf5(path, "softmax file")  # refuses external links, external storage and virtual datasets
    try:
        with f:
            for name in ("W", "b"):
                if not isinstance(f.get(name), h5py.Dataset):
                    raise ModelFileError(f"{path}: missing dataset '{name}' (expected W (vocab, dim) and b (vocab,))")
                if f[name].dtype.kind != "f":
                    raise ModelFileError(f"{path}: dataset '{name}' holds {f[name].dtype}, expected floats")
            if f["W"].shape != (vocab_size, dim) or f["b"].shape != (vocab_size,):  # checked before reading
                raise ModelFileError(
                    f"{path}: W has shape {f['W'].shape} and b {f['b'].shape}, expected ({vocab_size}, {dim}) and "
                    f"({vocab_size},) for this vocabulary and model; is it the vocab.txt the model was trained with?"
                )
            w, b = f["W"][...], f["b"][...]
    except ElmoError:  # already names the file and what is wrong
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:  # h5py's errors for damaged structure
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise ModelFileError(f"{path}: a damaged HDF5 softmax file ({type(e).__name__}: {reason})") from None
    for name, values in (("W", w), ("b", b)):
        if not np.isfinite(values).all():
            raise ModelFileError(f"{path}: dataset '{name}' contains NaN or infinite values")
    softmax = Softmax(vocab_size, dim)
    with torch.no_grad():
        softmax.W.copy_(torch.from_numpy(w.astype(np.float32)))
        softmax.b.copy_(torch.from_numpy(b.astype(np.float32)))
    return softmax
