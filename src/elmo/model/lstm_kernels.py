"""The LSTM layer's matrix products (doc 4.5), each in the fastest exact form for its shape.

`LstmLayer.forward` (bilm.py) runs the cell math; the products come from here, through one object per
call that gives step t's gates from h and h's projection (`StepProducts`): `Float32Products` below, or
`elmo.model.int8`'s int8 copy of the same products for a layer converted with `--int8`. Per call, the
input-to-gates product of every real step is one product over the steps packed together
(`packed_steps`); per step, the recurrent product takes one of three kernels, all exact float32 GEMMs
(docs/performance.md):

- row-major, h (n, P) @ W_h (P, 4H), for a handful of rows (the tail of a batch whose longest sentence
  runs on alone): MKL repacks the whole weight per call in the transposed form, which dominates for a
  handful of columns;
- oneDNN with the weight packed once per call, for inference on CPU with a large weight;
- otherwise transposed, W_h^T (4H, P) @ h^T (P, n), which BLAS runs about twice as fast as the
  row-major form for the small n of one step (the state then lives transposed in memory, and every
  gate block is a contiguous slice).

The projection is row-major up to PROJECTION_ROW_MAJOR_MAX_ROWS rows and transposed above. The
thresholds come from `python benchmarks/lstm_step.py --sweep-rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

LstmState = tuple[torch.Tensor, torch.Tensor]  # (c, h), each (rows, width)

# Up to these many active rows a step's products run row-major (h^T @ W) instead of transposed:
# MKL repacks the whole weight per call in the transposed form, which dominates for a handful of
# columns (`python benchmarks/lstm_step.py --sweep-rows`, docs/performance.md).
RECURRENT_ROW_MAJOR_MAX_ROWS = 3
PROJECTION_ROW_MAJOR_MAX_ROWS = 8


def _onednn_available() -> bool:
    try:
        return torch.backends.mkldnn.is_available() and all(
            hasattr(torch.ops.mkldnn, op) for op in ("_linear_pointwise", "_reorder_linear_weight"))
    except (AttributeError, RuntimeError):
        return False


# oneDNN's product with a weight packed ahead of time beats MKL's for steps of more than a few rows
# (1.2x at 64 rows, 2.6x at 8 on one thread for the `original` shapes), but it has no autograd
# (inference only) and a fixed cost per call that small weights do not repay: the bundled default
# model's 128 x 1024 runs faster on MKL (`python benchmarks/lstm_step.py --sweep-rows`).
ONEDNN_RECURRENCE = _onednn_available()
ONEDNN_MIN_WEIGHT = 1 << 19  # elements of the recurrent weight (P x 4H); the `small` shapes' 128 x 4096 qualify


def onednn_pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """A linear weight (out, in) in oneDNN's blocked layout, for products of about `rows` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def onednn_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """x (n, in) @ weight^T with an `onednn_pack`ed weight. No autograd: gradients would silently stop here."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def _onednn_packed(w_h_rows: torch.Tensor, rows: int, x: torch.Tensor, state: LstmState,
                   params: list[torch.Tensor]) -> torch.Tensor | None:
    """The recurrent weight (as (4H, P)) packed for oneDNN, if this call can use it.

    `params`: all of the layer's parameters, since a gradient to any of them (the projection's too)
    flows through the recurrent product of the next step.
    """
    no_grad = not torch.is_grad_enabled() or not any(t.requires_grad for t in (x, *state, *params))
    if not (ONEDNN_RECURRENCE and no_grad and rows > RECURRENT_ROW_MAJOR_MAX_ROWS and w_h_rows.numel() >= ONEDNN_MIN_WEIGHT
            and x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")):
        return None
    return onednn_pack(w_h_rows.t(), rows)


def packed_steps(x: torch.Tensor, active: list[int]) -> torch.Tensor:
    """x (B, T, D) with rows sorted by descending length -> the real steps' inputs, (sum of active, D):
    step t's block is its first active[t] rows (PackedSequence's layout), so padding costs nothing."""
    batch, steps, _ = x.shape
    if all(n == batch for n in active):
        return x.transpose(0, 1)[: len(active)].reshape(len(active) * batch, -1)
    # one gather: a cat of per-step slices would, in backward, fill a zero (T, B, D) per step
    t_idx, b_idx = (torch.arange(batch, device=x.device) < torch.tensor(active, device=x.device).unsqueeze(1)).nonzero(as_tuple=True)
    return x.reshape(batch * steps, -1)[b_idx * steps + t_idx]


class StepProducts(Protocol):
    """One call's products for `LstmLayer.forward` (its float32 or int8 form)."""

    def gates(self, t: int, h: torch.Tensor) -> Sequence[torch.Tensor]:
        """Step t's gate pre-activations (i, j, f, o), each (n, H), from h (n, P) of its n active rows."""

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """h (n, H) -> (n, P) through the layer's projection."""

    def tanh(self, x: torch.Tensor) -> torch.Tensor:
        """The cell's tanh (torch's in float32; int8 takes a faster one, elmo.model.int8)."""


class Float32Products:
    """A layer's float32 products for one call: the input products of all steps at once, then each
    step's recurrent product and projection in the kernel that is fastest for its number of rows."""

    def __init__(self, w_x: torch.Tensor, w_h_rows: torch.Tensor, w_p_rows: torch.Tensor | None, bias: torch.Tensor,
                 packed: torch.Tensor, active: list[int], x: torch.Tensor, state: LstmState,
                 params: list[torch.Tensor]):
        self.w_h_rows, self.w_p_rows = w_h_rows, w_p_rows
        widest = active[0] if active else 0
        self.onednn_w_h = _onednn_packed(w_h_rows, widest, x, state, params)
        # One view per step, (n, 4H): backward joins their grads once, not T full-size adds.
        if self.onednn_w_h is not None:
            self.pre_steps = torch.addmm(bias, packed, w_x).split(active)  # row-major, as oneDNN's output
        else:  # (4H, n) blocks in memory, so backward joins contiguous blocks
            self.pre_steps = [p.t() for p in torch.addmm(bias.unsqueeze(1), w_x.t(), packed.t()).split(active, dim=1)]
        # Transposed copies only when some step uses them (not for a batch of one row, as in PTB scoring).
        transposed = self.onednn_w_h is None and widest > RECURRENT_ROW_MAJOR_MAX_ROWS
        w_h = w_h_rows.t().contiguous() if transposed else None
        w_p = w_p_rows.t().contiguous() if w_p_rows is not None and widest > PROJECTION_ROW_MAJOR_MAX_ROWS else None
        if torch.is_autocast_enabled(x.device.type):  # cast the transposed copies once, not once per step
            low = torch.get_autocast_dtype(x.device.type)
            w_h, w_p = (None if w is None else w.to(low) for w in (w_h, w_p))
        self.w_h, self.w_p = w_h, w_p

    def gates(self, t: int, h: torch.Tensor) -> Sequence[torch.Tensor]:
        n = h.shape[0]
        if n <= RECURRENT_ROW_MAJOR_MAX_ROWS:
            return torch.addmm(self.pre_steps[t], h, self.w_h_rows).chunk(4, dim=1)
        if self.onednn_w_h is not None:
            return onednn_linear(h.contiguous(), self.onednn_w_h).add_(self.pre_steps[t]).chunk(4, dim=1)
        # split (4H, n) into contiguous blocks, so backward joins them with plain copies
        return [g.t() for g in torch.addmm(self.pre_steps[t].t(), self.w_h, h.t()).chunk(4, dim=0)]

    def project(self, h: torch.Tensor) -> torch.Tensor:
        return (self.w_p @ h.t()).t() if h.shape[0] > PROJECTION_ROW_MAJOR_MAX_ROWS else h @ self.w_p_rows

    tanh = staticmethod(torch.tanh)
