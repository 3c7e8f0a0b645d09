"""int8 inference on CPU: a loaded biLM's matrix products with int8 weights, converted once at load.

`quantize_bilm(bilm)` gives every LSTM layer (input and recurrent products, projection), every
highway and the char CNN's projection an int8 copy of its weight, one scale per output channel.
Activations are quantized as they come, one scale per row (token or batch row), so a row's numbers
never depend on the other rows of its batch: the int8 products accumulate exactly in int32, and
everything around them (scales, bias, gates, clipping, the cell state, the char CNN's convolution)
stays float32 (the cell's tanh is numpy's, `_Int8Steps.tanh`). A model's files are quantized once and
stored (`elmo.formats.int8_store`). By default the float32 parameters are kept and never changed, so nothing is written
back to weights.hdf5, and `state_dict()` is the float32 model's (`Elmo(int8=True)`); an `Embedder`
that loads its own model releases them (`keep_float32=False`), and a weight file is then read one
part at a time (`int8_parts`), so the process never holds the whole model in float32.

The kernel is torch's own fbgemm linear with a prepacked weight (`quantized::linear_dynamic`), the
fastest int8 product on the CPUs this was measured on (docs/performance.md#int8-on-cpu); torchao's CPU
path for int8 activations runs `torch._int_mm`, 20x slower than float32 there. fbgemm quantizes its
input with one scale per tensor, so each row is scaled to integers in [-63, 63] here first and one
extra row pins the tensor's range to [-64, 63]: fbgemm's scale is then exactly 1, its quantization
keeps our integers as they are, and its output is the exact integer product times the weight's
scale. Seven bits, not eight: on AVX2 without VNNI the u8 x s8 pair products are summed in int16,
which saturates with full-range activations (the check in `check_kernel` would catch it).
"""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from elmo.errors import ElmoError

from .allocator import return_freed_memory
from .lstm_kernels import StepProducts

ACTIVATION_LEVELS = 63  # |q| <= 63 per row; with the pinning row the tensor spans [-64, 63] (7 bits)


class Int8Unavailable(ElmoError, RuntimeError):
    """This CPU or torch build has no int8 kernel we trust: int8 refuses rather than running float32."""


@contextmanager
def _fbgemm_engine():
    """Prepack with fbgemm, then restore the user's engine; quantized tensors are deprecated API in
    torch 2.13 but still the only way into its int8 kernels, so their warning is silenced here."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = "fbgemm"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*quantize.*deprecated.*")
            yield
    finally:
        torch.backends.quantized.engine = before


def _supported_engines() -> list[str]:
    return list(torch.backends.quantized.supported_engines)


def check_kernel() -> None:
    """Raise `Int8Unavailable` unless fbgemm is built in and gives the exact integer product here."""
    engines = _supported_engines()
    if "fbgemm" not in engines:
        raise Int8Unavailable(f"int8 needs torch's fbgemm kernels (x86 CPUs with AVX2); this torch build "
                              f"{torch.__version__} on a {torch.backends.cpu.get_cpu_capability()} CPU has only "
                              f"{engines}. Run without --int8 / int8=True.")
    gen = torch.Generator().manual_seed(0)
    weight = torch.randint(-127, 128, (64, 96), generator=gen).float()
    weight[:, 0] = 127  # every channel's scale exactly 1, so the int8 weight is `weight` itself
    weight[1] = 127
    rows = torch.randint(-ACTIVATION_LEVELS, ACTIVATION_LEVELS + 1, (5, 96), generator=gen).float()
    rows[0] = ACTIVATION_LEVELS * torch.sign(weight[0])
    rows[1] = ACTIVATION_LEVELS  # with channel 1: the largest pair sums the kernel meets
    try:
        pinned = _pinned(*rows.shape)
        pinned[:-1] = rows
        got = Int8Linear(weight.t())._product(pinned)
    except ElmoError:
        raise
    except RuntimeError as e:
        raise Int8Unavailable(f"torch's int8 kernel failed on this CPU ({e}); run without --int8") from e
    exact = rows.double() @ weight.double().t()
    if not torch.equal(got.double(), exact):
        raise Int8Unavailable("torch's int8 kernel gives inexact products on this CPU (largest error "
                              f"{(got.double() - exact).abs().max().item():g}); run without --int8")


class Int8Linear:
    """x (n, in) @ weight (in, out) + bias, weight int8 per output channel, x int8 per row, int32 sums.

    `weight` in the file's orientation (in, out), as the biLM keeps it. Not an nn.Module on purpose:
    the packed copy is not a parameter, so it is never saved, moved or trained.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        w = weight.detach().float()  # (in, out): quantized per column, so no float32 copy is made
        scale = torch.maximum(w.amax(dim=0), w.amin(dim=0).neg()).div_(127).clamp_(min=torch.finfo(torch.float32).tiny)
        self._pack(quantize_columns(w, scale), scale, None if bias is None else bias.detach().float().clone())

    @classmethod
    def from_quantized(cls, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> Int8Linear:
        """The linear whose int8 weight (in, out), scales and bias were made before (`quantized()`), as
        an int8 store holds them: packed for the kernel, nothing quantized again."""
        linear = cls.__new__(cls)
        linear._pack(q, scale, bias)
        return linear

    def _pack(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.in_features, self.out_features = q.shape
        self.scale, self.bias = scale, bias
        zeros = torch.zeros(self.out_features, dtype=torch.long)
        with _fbgemm_engine():
            q = q.t().contiguous()  # (out, in), as fbgemm packs: a view's own memory when the store gave (out, in)
            q = torch._make_per_channel_quantized_tensor(q, scale.double(), zeros, 0)
            self._packed = torch.ops.quantized.linear_prepack(q, None)

    def quantized(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(int8 weight (in, out), float32 scale per output channel, float32 bias or None): what
        `from_quantized` takes back, read from the packed copy (for writing an int8 store)."""
        with _fbgemm_engine():
            q = torch.ops.quantized.linear_unpack(self._packed)[0].int_repr()  # (out, in)
        return q.t(), self.scale, self.bias

    @property
    def nbytes(self) -> int:
        """The int8 weight, its scales and the bias."""
        extra = 0 if self.bias is None else self.bias.numel() * 4
        return self.in_features * self.out_features + self.out_features * 4 + extra

    @property
    def float32_nbytes(self) -> int:
        """What the same weight and bias take in float32."""
        return 4 * (self.in_features * self.out_features + (0 if self.bias is None else self.bias.numel()))

    def _product(self, pinned: torch.Tensor) -> torch.Tensor:
        """A `_pinned` buffer -> its rows' exact integer products with the int8 weight, times its scales."""
        return torch.ops.quantized.linear_dynamic(pinned, self._packed, True)[:-1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise Int8Unavailable(f"int8 runs float32 inputs on the CPU only, found {x.dtype} on {x.device}")
        # abs().amax(): 10-50x faster here than vector_norm(x, inf), which takes a slow reduction path
        row_scale = x.abs().amax(dim=1, keepdim=True).clamp_(min=torch.finfo(torch.float32).tiny).div_(ACTIVATION_LEVELS)
        pinned = _pinned(*x.shape)
        torch.div(x, row_scale, out=pinned[:-1]).round_()
        y = self._product(pinned).mul_(row_scale)
        return y if self.bias is None else y.add_(self.bias)


def quantize_columns(w: torch.Tensor, scale: torch.Tensor, rows_per_block: int = 64) -> torch.Tensor:
    """w (in, out) -> int8 round(w x (1 / scale)) per column, as torch.quantize_per_channel rounds (to
    nearest even, times the float32 reciprocal), a block of rows at a time: no float32 copy of w is made,
    and it runs 2-5x faster than quantize_per_channel + int_repr here."""
    q = torch.empty(w.shape, dtype=torch.int8)
    inverse = scale.reciprocal()
    for start in range(0, w.shape[0], rows_per_block):
        q[start : start + rows_per_block] = torch.mul(w[start : start + rows_per_block], inverse).round_()
    return q


def _pinned(rows: int, width: int) -> torch.Tensor:
    """An empty (rows + 1, width) input whose last row pins fbgemm's per-tensor range to [-64, 63],
    so that its scale is exactly 1 and its zero point 64; the caller fills the first `rows`."""
    pinned = torch.empty(rows + 1, width)
    pinned[-1] = -ACTIVATION_LEVELS - 1
    pinned[-1, 0] = ACTIVATION_LEVELS
    return pinned


def _refuse_gradients(params: Sequence[torch.Tensor], *tensors: torch.Tensor) -> None:
    if torch.is_grad_enabled() and any(t.requires_grad for t in (*params, *tensors)):
        raise Int8Unavailable("int8 is for inference: this biLM's weights or inputs require gradients "
                              "(training or requires_grad=True); use the float32 model to train")


class Int8CharProducts:
    """A `CharEncoder`'s highways (carry and transform as one product) and projection in int8."""

    def __init__(self, encoder, linears: list[Int8Linear] | None = None):
        """`linears`: the highways' and projection's (`self.linears`) made before, else quantized here."""
        self.encoder = encoder
        if linears is None:
            linears = [Int8Linear(torch.cat([encoder.highway_carry_w[k], encoder.highway_transform_w[k]], dim=1),
                                  torch.cat([encoder.highway_carry_b[k], encoder.highway_transform_b[k]]))
                       for k in range(encoder.config.n_highway)]
            linears += [] if encoder.proj_w is None else [Int8Linear(encoder.proj_w, encoder.proj_b)]
        n = encoder.config.n_highway
        self.highways, self.projection = linears[:n], (linears[n] if len(linears) > n else None)

    @property
    def linears(self) -> list[Int8Linear]:
        return self.highways + ([] if self.projection is None else [self.projection])

    def highway(self, k: int, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _refuse_gradients(list(self.encoder.parameters()), h)
        carry, transform = self.highways[k](h).chunk(2, dim=1)
        gate = torch.sigmoid(carry)
        return gate * torch.relu(transform) + (1.0 - gate) * h, gate

    def project(self, h: torch.Tensor) -> torch.Tensor:
        return h if self.projection is None else self.projection(h)

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.highways) + (0 if self.projection is None else self.projection.nbytes)


class Int8LstmProducts:
    """An `LstmLayer`'s input, recurrent and projection products in int8: per call, the same
    `lstm_kernels.StepProducts` as the float32 kernels give."""

    def __init__(self, layer, linears: list[Int8Linear] | None = None):
        """`linears`: the input, recurrent and projection products (`self.linears`) made before, else
        quantized here."""
        if linears is None:
            w_x, w_h = layer.W_0[: layer.input_dim], layer.W_0[layer.input_dim :]
            linears = [Int8Linear(w_x, layer.B + layer._forget_one()), Int8Linear(w_h)]
            linears += [] if layer.W_P_0 is None else [Int8Linear(layer.W_P_0)]
        self.input, self.recurrent = linears[:2]
        self.projection = linears[2] if len(linears) > 2 else None

    @property
    def linears(self) -> list[Int8Linear]:
        return [self.input, self.recurrent] + ([] if self.projection is None else [self.projection])

    def products(self, packed: torch.Tensor, active: list[int], x: torch.Tensor, state, params) -> StepProducts:
        _refuse_gradients(params, x, *state)
        return _Int8Steps(packed, active, self.input, self.recurrent, self.projection)

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in (self.input, self.recurrent, self.projection) if m is not None)


class _Int8Steps:
    """One call's int8 products (a `StepProducts`). The input products are made a block of steps at a
    time, as the steps come: the same numbers as all at once (each row is quantized by itself), but at
    most one block of (rows, 4 x cells) float32 gate inputs is held instead of the whole sentence's. A
    block is as many steps as fit in ROWS_PER_BLOCK rows (at least one step): 16 MB at the original's
    4 x 4096 cells; fbgemm's rate per row does not grow past a few dozen rows (docs/performance.md's kernel
    tables: 64 rows as fast as 2,048 or faster)."""

    ROWS_PER_BLOCK = 256

    def __init__(self, packed: torch.Tensor, active: list[int], input_linear: Int8Linear, recurrent: Int8Linear,
                 projection: Int8Linear | None):
        self.packed, self.active, self.input = packed, active, input_linear
        self.recurrent, self.projection = recurrent, projection
        self.starts = np.concatenate([[0], np.cumsum(active)]).tolist()  # step t's rows: starts[t]:starts[t+1]
        self.block_start, self.block = 0, []

    def _input_product(self, t: int) -> torch.Tensor:
        if not self.block_start <= t < self.block_start + len(self.block):
            end = bisect.bisect_right(self.starts, self.starts[t] + self.ROWS_PER_BLOCK, lo=t + 2) - 1
            self.block = []  # the previous block's memory is free before the next is made
            rows = self.packed[self.starts[t] : self.starts[end]]
            self.block_start, self.block = t, list(self.input(rows).split(self.active[t:end]))
        return self.block[t - self.block_start]

    def gates(self, t: int, h: torch.Tensor) -> Sequence[torch.Tensor]:
        return self.recurrent(h).add_(self._input_product(t)).chunk(4, dim=1)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        return self.projection(h)

    @staticmethod
    def tanh(x: torch.Tensor) -> torch.Tensor:
        """numpy's float32 tanh: 4-6x faster than torch 2.13's on the AVX-512 CPU it was measured on
        (docs/performance.md), within 3e-7 of it, and like it elementwise, so a row's result never
        depends on its batch. The float32 path keeps torch's, so its numbers stay as they were."""
        return torch.from_numpy(np.tanh(x.numpy()))


def int8_parts(bilm) -> list[tuple[torch.nn.Module, Callable[..., None]]]:
    """The parts converted one at a time, in the weight file's order: the char encoder, then each LSTM
    layer. Each comes with `convert(keep_float32, linears=None)`, which gives that part its int8 products
    (quantized from its float32 weights, or `linears` made before: an int8 store's) and, unless kept,
    releases the float32 weights they replace (a loader fills one part, converts it, then reads the
    next, so at most one part's float32 weights are ever held)."""
    enc = bilm.char_encoder

    def convert_encoder(keep_float32: bool, linears: list[Int8Linear] | None = None) -> None:
        enc.int8 = Int8CharProducts(enc, linears)
        if not keep_float32:
            for weights in (enc.highway_carry_w, enc.highway_transform_w):
                for k in range(len(weights)):
                    weights[k] = _released()
            if enc.proj_w is not None:
                enc.proj_w = _released()

    def converter(layer) -> Callable[[bool], None]:
        def convert_layer(keep_float32: bool, linears: list[Int8Linear] | None = None) -> None:
            layer.int8 = Int8LstmProducts(layer, linears)
            if not keep_float32:
                layer.W_0 = _released()
                if layer.W_P_0 is not None:
                    layer.W_P_0 = _released()
        return convert_layer

    layers = [layer for stack in (bilm.forward_lstm, bilm.backward_lstm) for layer in stack.layers]
    return [(enc, convert_encoder)] + [(layer, converter(layer)) for layer in layers]


def _released() -> torch.nn.Parameter:
    """What stands in for a float32 weight whose int8 copy replaced it: no elements, so that saving or
    reusing it fails on its shape instead of reading stale numbers."""
    return torch.nn.Parameter(torch.empty(0), requires_grad=False)


def quantize_bilm(bilm, keep_float32: bool = True) -> None:
    """Give `bilm` (a loaded `BiLM`, on the CPU) int8 copies of its products, in place; idempotent.

    `keep_float32=False` releases the float32 weights that the int8 copies replace (biases, the char
    embedding and convolutions stay float32): the biLM then holds about a quarter of the bytes, but is
    for inference only, and cannot be saved or converted back (`float32_released` says so).
    Raises `Int8Unavailable` where this CPU/torch build has no int8 kernel, never falling back to float32.
    """
    check_kernel()
    if getattr(bilm, "float32_released", False):
        return
    devices = {p.device.type for p in bilm.parameters()}
    if devices != {"cpu"}:
        raise Int8Unavailable(f"int8 runs on the CPU only; this biLM is on {sorted(devices)}")
    with torch.no_grad():
        for _, convert in int8_parts(bilm):
            convert(keep_float32)
    bilm.float32_released = not keep_float32
    bilm.token_cache.clear()
    if not keep_float32:
        return_freed_memory()


def is_quantized(bilm) -> bool:
    return getattr(bilm.char_encoder, "int8", None) is not None


def weight_bytes(bilm) -> tuple[int, int]:
    """(float32 bytes, int8 bytes) of the weights that int8 converts (the char CNN's filters and
    embedding stay float32 in both and are not counted)."""
    enc = bilm.char_encoder
    layers = [layer for stack in (bilm.forward_lstm, bilm.backward_lstm) for layer in stack.layers]
    if is_quantized(bilm):  # counted from the int8 copies, whose float32 originals may be released
        linears = [*enc.int8.highways, enc.int8.projection]
        linears += [m for layer in layers for m in (layer.int8.input, layer.int8.recurrent, layer.int8.projection)]
        linears = [m for m in linears if m is not None]
        return sum(m.float32_nbytes for m in linears), sum(m.nbytes for m in linears)
    converted = [*enc.highway_carry_w, *enc.highway_transform_w, *enc.highway_carry_b, *enc.highway_transform_b]
    converted += [p for p in (enc.proj_w, enc.proj_b) if p is not None]
    converted += [p for layer in layers for p in (layer.W_0, layer.B, layer.W_P_0) if p is not None]
    return sum(p.numel() * 4 for p in converted), 0


def held_bytes(bilm) -> int:
    """Bytes of weights the biLM holds: its parameters as stored, plus its int8 copies."""
    held = sum(p.numel() * p.element_size() for p in bilm.parameters())
    if is_quantized(bilm):
        layers = [layer for stack in (bilm.forward_lstm, bilm.backward_lstm) for layer in stack.layers]
        held += bilm.char_encoder.int8.nbytes + sum(layer.int8.nbytes for layer in layers)
    return held


def token_cosines(fp32: np.ndarray, int8: np.ndarray) -> np.ndarray:
    """(L+1, n, D) vectors of one sentence from each path -> (L+1, n) cosines, for the accuracy checks."""
    dot = (fp32.astype(np.float64) * int8).sum(-1)
    return dot / np.maximum(np.linalg.norm(fp32, axis=-1) * np.linalg.norm(int8, axis=-1), 1e-30)
