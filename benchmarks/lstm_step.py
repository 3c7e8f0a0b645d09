"""Where one LSTM time step of the `original` shapes spends its time (embedding, batch 64).

The per-step work is the recurrent GEMM (4H x P @ P x n, transposed as in `LstmLayer.forward`), the
gate elementwise math and the projection (P x H @ H x n). Prints ms per step for each and their
GFLOP/s, to compare with the large-GEMM rate `benchmarks/speed.py` reports. Run on an idle machine:

    python benchmarks/lstm_step.py --threads 1
    python benchmarks/lstm_step.py --threads 1 --sweep-rows         # products by active rows
    python benchmarks/lstm_step.py --threads 2 --gemm 2560,64,8192  # any product beside 2048^3
"""

from __future__ import annotations

import argparse
import time

import torch

from elmo.model import lstm_kernels


def timed(fn, repeats: int) -> float:
    for _ in range(5):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cell", type=int, default=4096)
    p.add_argument("--projection", type=int, default=512)
    p.add_argument("--rows", type=int, default=64, help="active sentences in the step")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--sweep-rows", action="store_true",
                   help="time the products for 1-64 active rows, transposed (W^T @ h^T), row-major (h @ W) and "
                        "oneDNN: where lstm_kernels.py's *_ROW_MAJOR_MAX_ROWS thresholds and its oneDNN choice come from")
    p.add_argument("--gemm", metavar="M,K,N", help="time one (M x K) @ (K x N) product beside the 2048^3 one, "
                   "e.g. 2560,64,8192 for the `tiny` preset's sampled-softmax logits")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.gemm:
        m, k, n = (int(v) for v in args.gemm.split(","))
        for shape in ((m, k, n), (2048, 2048, 2048)):
            a, b, c = torch.randn(shape[0], shape[1]), torch.randn(shape[1], shape[2]), torch.empty(shape[0], shape[2])
            ms = timed(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), args.repeats)  # no page faults for a fresh output
            print(f"{args.threads} thread(s), {shape[0]} x {shape[1]} @ {shape[1]} x {shape[2]}: {ms:.2f} ms, "
                  f"{2 * shape[0] * shape[1] * shape[2] / ms / 1e6:.0f} GFLOP/s")
        return
    if args.sweep_rows:
        sweep_rows(args)
        return
    H, P, n = args.cell, args.projection, args.rows
    g = torch.Generator().manual_seed(0)
    w_h, w_p = torch.randn(4 * H, P, generator=g) * 0.02, torch.randn(P, H, generator=g) * 0.02
    pre, h, c = torch.randn(4 * H, n, generator=g), torch.randn(P, n, generator=g), torch.randn(H, n, generator=g)
    z = torch.addmm(pre, w_h, h)

    def gates():
        i, j, f, o = z.chunk(4, dim=0)
        c_t = (torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)).clamp(-3, 3)
        return torch.sigmoid(o) * torch.tanh(c_t)

    h_t = gates()
    recurrent = timed(lambda: torch.addmm(pre, w_h, h), args.repeats)
    elementwise = timed(gates, args.repeats)
    projection = timed(lambda: (w_p @ h_t).clamp(-3, 3), args.repeats)
    total = recurrent + elementwise + projection
    print(f"{args.threads} thread(s), H={H} P={P} n={n}: ms per step: recurrent GEMM {recurrent:.2f} "
          f"({2 * 4 * H * P * n / recurrent / 1e6:.0f} GFLOP/s), gates {elementwise:.2f} ({elementwise / total:.0%}), "
          f"projection {projection:.2f} ({2 * H * P * n / projection / 1e6:.0f} GFLOP/s)")
    print("recurrent GEMM with a weight packed once (inference-only alternatives, GFLOP/s):")
    for name, fn in prepacked_variants(w_h, h).items():
        print(f"  {name}: " + (f"{2 * 4 * H * P * n / timed(fn, args.repeats) / 1e6:.0f}" if fn else "not available"))


def sweep_rows(args) -> None:
    H, P = args.cell, args.projection
    g = torch.Generator().manual_seed(0)
    w_h_rows, w_p_rows = torch.randn(P, 4 * H, generator=g), torch.randn(H, P, generator=g)  # as stored: x @ W
    w_h, w_p = w_h_rows.t().contiguous(), w_p_rows.t().contiguous()  # as LstmLayer.forward makes them
    onednn = _onednn_packed(w_h, 64)  # packed for the batch's widest step, as LstmLayer does
    print(f"{args.threads} thread(s), H={H} P={P}: ms per product, transposed / row-major"
          + (" / oneDNN packed (inference)" if onednn is not None else ""))
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64):
        pre, h, c = torch.randn(4 * H, n, generator=g), torch.randn(P, n, generator=g), torch.randn(H, n, generator=g)
        rec_t = timed(lambda pre=pre, h=h: torch.addmm(pre, w_h, h), args.repeats)
        rec_r = timed(lambda pre=pre, h=h: torch.addmm(pre.t(), h.t(), w_h_rows).t(), args.repeats)
        rec_o = ""
        if onednn is not None:
            pre_rows, h_rows = pre.t().contiguous(), h.t().contiguous()
            rec_o = " / " + f"{timed(lambda p=pre_rows, x=h_rows: lstm_kernels.onednn_linear(x, onednn).add_(p), args.repeats):6.2f}"
        proj_t = timed(lambda c=c: w_p @ c, args.repeats)
        proj_r = timed(lambda c=c: (c.t() @ w_p_rows).t(), args.repeats)
        print(f"  n={n:2d}  recurrent {rec_t:6.2f} / {rec_r:6.2f}{rec_o}   projection {proj_t:6.3f} / {proj_r:6.3f}")


def _onednn_packed(w_h: torch.Tensor, rows: int) -> torch.Tensor | None:
    return lstm_kernels.onednn_pack(w_h, rows) if lstm_kernels.ONEDNN_RECURRENCE else None


def prepacked_variants(w_h: torch.Tensor, h: torch.Tensor) -> dict:
    """The per-step product h^T @ W_h with the weight reordered ahead of time, as MKL and oneDNN offer."""
    h_rows = h.t().contiguous()
    variants = {}
    try:
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w_h, h_rows.shape[0])
        variants["MKL packed GEMM (torch.ops.mkl._mkl_linear)"] = (
            lambda: torch.ops.mkl._mkl_linear(h_rows, packed, w_h, None, h_rows.shape[0]))
    except (RuntimeError, AttributeError):
        variants["MKL packed GEMM (torch.ops.mkl._mkl_linear)"] = None
    onednn = _onednn_packed(w_h, h_rows.shape[0])
    variants["oneDNN, weight packed by _reorder_linear_weight (what LstmLayer uses for inference)"] = (
        (lambda: lstm_kernels.onednn_linear(h_rows, onednn)) if onednn is not None else None)
    try:
        w_onednn = w_h.to_mkldnn()
        variants["oneDNN linear, weight in oneDNN layout (incl. converting h)"] = (
            lambda: torch._C._nn.mkldnn_linear(h_rows.to_mkldnn(), w_onednn).to_dense())
    except (RuntimeError, AttributeError):
        variants["oneDNN linear, weight in oneDNN layout (incl. converting h)"] = None
    return variants


if __name__ == "__main__":
    main()
