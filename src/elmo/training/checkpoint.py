"""Training checkpoints: one torch file per saved step, written atomically, the last K kept."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from elmo.errors import ModelFileError
from elmo.files.fileio import atomic_path
from elmo.files.layout import CHECKPOINT_DIR
from elmo.files.torch_files import check_plain, load_torch_file

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


def checkpoint_path(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"ckpt-{step:09d}.pt"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of the complete checkpoints, oldest first (temporary files are ignored)."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(state: dict, run_dir: str | os.PathLike, step: int, keep: int) -> Path:
    """Write under a temporary name and rename, so a kill never leaves a partial `ckpt-*.pt`."""
    path = checkpoint_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
    for _, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    for stale in path.parent.glob(".ckpt-*.tmp"):  # left by a run killed while writing
        stale.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A training checkpoint, read with weights_only=True (no code runs), holding a dict of finite values."""
    state = load_torch_file(path, "a training checkpoint (checkpoints/ckpt-*.pt of `elmo train`)")
    if not isinstance(state, dict):
        raise ModelFileError(f"{path}: expected a training checkpoint (a dict), found a {type(state).__name__}")
    check_plain(state, path)
    for key, types in CHECKPOINT_FIELDS.items():
        if not isinstance(state.get(key), types) or isinstance(state.get(key), bool):
            raise ModelFileError(f"{path}: not a training checkpoint of `elmo train`: '{key}' is "
                                 f"{type(state.get(key)).__name__ if key in state else 'missing'}")
    if not all(isinstance(v, torch.Tensor) for v in state["model"].values()):
        raise ModelFileError(f"{path}: 'model' must map parameter names to tensors")
    if state["world_size"] < 1 or len(state["ranks"]) != state["world_size"] or not all(
            isinstance(r, dict) and {"data", "rng", "lstm"} <= set(r) for r in state["ranks"]):
        raise ModelFileError(f"{path}: 'ranks' must hold one {{data, rng, lstm}} per process of 'world_size'")
    return state


CHECKPOINT_FIELDS = {"step": int, "tokens": int, "world_size": int, "elapsed": (int, float), "model": dict,
                     "optimizer": dict, "ranks": list}


def load_into(module: torch.nn.Module, state: dict, path: str | os.PathLike, what: str = "model") -> None:
    """module.load_state_dict(state), a mismatch (another architecture) as one line naming the file."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        first = str(e).strip().splitlines()
        detail = " ".join(line.strip() for line in first[1:3]) if len(first) > 1 else (first[0] if first else "")
        raise ModelFileError(f"{path}: its {what} does not fit this run's architecture (options.json and vocab.txt): "
                             f"{detail[:200]}") from None
