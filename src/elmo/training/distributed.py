"""DistributedDataParallel set-up under torchrun: gloo on CPU, nccl on GPU; plain runs are rank 0 of 1."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from elmo.model.devices import TorchrunPlace, device_of_rank


def setup(requested_device: str | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device); starts the process group when torchrun launched several processes."""
    place = TorchrunPlace.from_env()
    device = device_of_rank(requested_device, place.local_rank)
    if place.world > 1 and not dist.is_initialized() and device.type == "cuda":
        torch.cuda.set_device(device)
    place.join("nccl" if device.type == "cuda" else "gloo")
    return place.rank, place.world, device


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_sum(t: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(t)
    return t


def gather(obj) -> list:
    """Every rank's `obj`, in rank order (all ranks get the list)."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def wrap(model: torch.nn.Module, world: int) -> torch.nn.Module:
    """DDP over the parameters with dense gradients. DDP cannot all-reduce a sparse gradient of a plain
    parameter (it expects them only from nn.Embedding), so the sampled softmax's W
    (`Softmax.sparse_grad`) is left out here, made the same on every rank, and averaged by
    `average_sparse_gradients` after each backward."""
    if world == 1:
        return model
    sparse = ["softmax.W"] if model.softmax.sparse_grad else []
    for name in sparse:
        dist.broadcast(model.get_parameter(name).data, src=0)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, sparse)
    return DistributedDataParallel(model)


def average_sparse_gradients(params: list[torch.Tensor]) -> None:
    """The ranks' mean of every sparse gradient (gloo all-reduces sparse tensors), as DDP does for dense ones."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for p in params:
        if p.grad is not None and p.grad.is_sparse:
            grad = p.grad.coalesce()
            dist.all_reduce(grad)
            p.grad = grad.coalesce() / dist.get_world_size()
