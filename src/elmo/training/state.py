"""What a training run has reached, as one object: what a checkpoint keeps and a resumed run reads back.

A checkpoint holds the weights, the optimizer, the step, the tokens seen, the training time so far,
and per rank the data position, the LSTM states and the RNG states, so a resumed run computes exactly
what the uninterrupted one would have. `TrainingState.state_dict` writes those keys and
`load_state_dict` reads the same keys back (checkpoint.CHECKPOINT_FIELDS checks them on loading).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import TrainingError, distributed
from .batchers import Batcher
from .checkpoint import load_into, save_checkpoint
from .model import LanguageModel, States
from .settings import check


@dataclass
class TrainingState:
    """The model, its optimizer, this rank's batcher and sampler generator, and how far the run has got."""

    model: LanguageModel
    optimizer: torch.optim.Optimizer
    batcher: Batcher  # make_batcher's: one of the four (batchers.py)
    generator: torch.Generator  # the sampled softmax's negatives
    device: torch.device
    rank: int = 0
    world: int = 1
    step: int = 0
    tokens: int = 0
    states: States | None = None  # the LSTM states a streaming batcher carries to the next window
    elapsed_before: float = 0.0  # training seconds of the invocations before this one
    started: float = field(default_factory=time.time)
    last_checkpoint: Path | None = None  # the last good one, named when training has to stop

    def elapsed(self) -> float:
        return self.elapsed_before + time.time() - self.started

    def state_dict(self) -> dict | None:
        """The checkpoint: every rank's part gathered (all ranks call this), None on ranks other than 0."""
        mine = {"data": self.batcher.state(), "lstm": _states_to(self.states, "cpu"),
                "rng": _rng_state(self.generator, self.device)}
        everyone = distributed.gather(mine)
        if self.rank != 0:
            return None
        return {"step": self.step, "tokens": self.tokens, "world_size": self.world, "elapsed": self.elapsed(),
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "ranks": everyone}

    def load_state_dict(self, checkpoint: dict, path: Path, lr: float | None = None) -> None:
        """Continue from `checkpoint` (read from `path`); `lr`: a new learning rate from this step on."""
        load_into(self.model, checkpoint["model"], path)
        load_into(self.optimizer, checkpoint["optimizer"], path, "optimizer state")  # with the lr it had reached
        if lr is not None:
            check(lr > 0, f"--lr must be positive, found {lr}")
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        mine = checkpoint["ranks"][self.rank]
        self.batcher.restore(mine["data"])
        _set_rng_state(mine["rng"], self.generator, self.device)
        self.states = _states_to(mine["lstm"], self.device)
        self.step, self.tokens, self.elapsed_before = checkpoint["step"], checkpoint["tokens"], checkpoint["elapsed"]
        self.last_checkpoint = Path(path)

    def save(self, out: Path, keep: int) -> None:
        """Checkpoint this step (rank 0 writes; every rank must call this); weights that are not finite stop the run."""
        bad = [name for name, p in self.model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            raise self.not_finite(self.step, f"the model's weights are not finite ({', '.join(bad)})")
        state = self.state_dict()
        if state is not None:
            self.last_checkpoint = save_checkpoint(state, out, self.step, keep)

    def not_finite(self, step: int, found: str) -> TrainingError:
        """The error that stops training at `step`; `found`: what is not finite, with the values seen."""
        kept = (f"the last good checkpoint, {self.last_checkpoint}, is kept (continue from it with --resume and a "
                "lower --lr)" if self.last_checkpoint else "no checkpoint had been written yet")
        return TrainingError(f"step {step}: {found}; training stopped and nothing was saved after step {step - 1}; "
                             f"{kept}. Try a lower --lr or check the corpus.")


def _rng_state(generator: torch.Generator, device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state(), "sampler": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, generator: torch.Generator, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["sampler"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _states_to(states, device):
    if states is None:
        return None
    return tuple([(c.to(device), h.to(device)) for c, h in direction] for direction in states)
