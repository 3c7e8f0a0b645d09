"""Which torch device a command or an `Embedder` runs on, checked once; torchrun's ranks, their process
group and one GPU per rank, for embedding and training alike."""

from __future__ import annotations

import dataclasses
import datetime
import os
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from elmo.errors import InputError


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


@dataclass(frozen=True)
class TorchrunPlace:
    """This process among torchrun's workers (RANK, LOCAL_RANK, WORLD_SIZE): rank 0 of 1 without torchrun."""

    rank: int = 0
    local_rank: int = 0
    world: int = 1

    @classmethod
    def from_env(cls) -> TorchrunPlace:
        env = os.environ
        return cls(int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0")), int(env.get("WORLD_SIZE", "1")))

    def join(self, backend: str, timeout: datetime.timedelta | None = None) -> None:
        """Start the process group once when torchrun launched several processes (a plain run has none)."""
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group(backend, **({} if timeout is None else {"timeout": timeout}))


def local_rank() -> int:
    return TorchrunPlace.from_env().local_rank


def rank_device(requested: str, world: int) -> str:
    """`elmo embed --device`: under torchrun, a bare "cuda" means one GPU per local rank (round-robin when
    there are fewer GPUs); anything else is left for the Embedder to check."""
    if requested == "cuda" and world > 1 and torch.cuda.is_available():
        return str(device_of_rank("cuda", local_rank()))
    return requested


def device_of_rank(requested: str | None, local_rank: int) -> torch.device:
    """--device checked (None: cuda where there is one, else cpu); a bare "cuda" is this local rank's GPU."""
    if requested is None:
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    device = check_device(requested, "--device")
    return gpu_of_rank(local_rank) if device.type == "cuda" and device.index is None else device


def gpu_of_rank(rank: int) -> torch.device:
    """The GPU of a local rank: ranks share GPUs round-robin when there are fewer GPUs than ranks."""
    return torch.device("cuda", rank % torch.cuda.device_count())


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), where bf16 autocast is a speedup:
    without it oneDNN emulates bf16 and runs slower than float32."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
