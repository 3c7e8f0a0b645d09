"""Which torch device a command or an `Embedder` runs on, checked once, and one GPU per torchrun rank."""

from __future__ import annotations

import dataclasses
import os
from typing import TypeVar

import torch

from .errors import InputError


def check_device(requested: str | torch.device, flag: str = "device") -> torch.device:
    """cpu, cuda or cuda:N, on a machine that has it; anything else is an `InputError` naming it.

    torch itself accepts "meta" and other backends, which cannot hold the weights a model loads.
    """
    text = str(requested)
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise InputError(f"{flag} {text}: expected cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"{flag} {text}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InputError(f"{flag} {text}: this machine has {torch.cuda.device_count()} GPU(s), cuda:0.."
                             f"cuda:{torch.cuda.device_count() - 1}")
    return device


T = TypeVar("T")


def move_tensors(batch: T, device: str | torch.device) -> T:
    """A copy of a dataclass batch with every tensor field on `device` (None and other fields kept):
    one way for the training windows and the task batches."""
    moved = {f.name: value.to(device, non_blocking=True) for f in dataclasses.fields(batch)
             if isinstance(value := getattr(batch, f.name), torch.Tensor)}
    return dataclasses.replace(batch, **moved)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def rank_device(requested: str, world: int) -> str:
    """Under torchrun, a bare "cuda" means one GPU per local rank (round-robin when there are fewer GPUs)."""
    if requested == "cuda" and world > 1 and torch.cuda.is_available():
        return str(gpu_of_rank(local_rank()))
    return requested


def gpu_of_rank(rank: int) -> torch.device:
    """The GPU of a local rank: ranks share GPUs round-robin when there are fewer GPUs than ranks."""
    return torch.device("cuda", rank % torch.cuda.device_count())


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), where bf16 autocast is a speedup:
    without it oneDNN emulates bf16 and runs slower than float32."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
