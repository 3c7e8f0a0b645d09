"""The lab's small view of task models: taggers that predict, and the layer mixes tasks learned.

The task models live in `elmo.tasks` (`load_tagger(path).predict(tokens)`, loaded here directly);
the lab uses only this much of them (a test's stand-in may provide just that):
- a tagger: `predict(tokens) -> list[str]`; optionally `input_parts(tokens) -> {"word": (n, dw),
  "elmo": (n, de)}` (the two halves of the paper's [x; ELMo]) and `layer_weights()` (its mix).
- a mix preset: what `layer_weights()` or a run's metrics JSON holds ({"input": {"weights": s,
  "gamma": g}}), a ScalarMix, or JSON with raw "scalar_parameters" and "gamma".
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elmo.errors import InputError, InputFileNotFound, ModelFileError
from elmo.tasks.predict import load_tagger, load_task_model


@dataclass(frozen=True)
class MixPreset:
    """A learned layer mix: raw scalars w (softmax gives the layer weights s) and gamma."""

    name: str
    scalar_parameters: tuple[float, ...]
    gamma: float
    source: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "scalar_parameters": list(self.scalar_parameters), "gamma": self.gamma,
                "source": self.source}


def preset_from_mix(name: str, mix: Any, source: str = "") -> MixPreset | None:
    """A learned mix in any of the shapes the task code keeps it -> MixPreset (None if there is none).

    Accepted: a ScalarMix; an object with layer_weights(); a dict with "scalar_parameters" (raw w)
    or "weights" (s = softmax(w), stored as log s) and "gamma", possibly under "scalar_mix", "mix"
    or "input" (the input-side mix, the paper's main one).
    """
    if mix is None:
        return None
    if callable(getattr(mix, "layer_weights", None)):
        return preset_from_mix(name, mix.layer_weights(), source)
    if isinstance(mix, dict):
        for key in ("scalar_mix", "mix", "input"):
            if isinstance(mix.get(key), dict):
                return preset_from_mix(name, mix[key], source)
        if "scalar_parameters" in mix:
            w = np.asarray(mix["scalar_parameters"], dtype=np.float64).ravel()
        elif "weights" in mix:
            s = np.asarray(mix["weights"], dtype=np.float64).ravel()
            if s.size == 0 or np.any(s < 0) or abs(s.sum() - 1.0) > 1e-3:
                return None
            w = np.log(np.maximum(s, 1e-12))
        else:
            return None
        gamma = mix.get("gamma", 1.0)
    else:
        w, gamma = getattr(mix, "scalar_parameters", None), getattr(mix, "gamma", 1.0)
        if w is None:
            return None
        if hasattr(w, "detach"):
            w = np.asarray(w.detach().cpu(), dtype=np.float64).ravel()
        else:  # ScalarMix's ParameterList of (1,) Parameters (AllenNLP's layout)
            w = np.array([float(p.detach().cpu().reshape(())) for p in w], dtype=np.float64)
    gamma = float(np.asarray(gamma.detach().cpu() if hasattr(gamma, "detach") else gamma, dtype=np.float64).ravel()[0])
    return MixPreset(name, tuple(round(float(v), 6) for v in w), gamma, source)


def load_preset(name: str, path: str | os.PathLike) -> MixPreset:
    """A preset from a JSON file (a task run's metrics, or just the mix), a folder of them, or a saved
    task model."""
    p = Path(path)
    if not p.exists():
        raise InputFileNotFound(f"--preset {name}={path}: no such file or folder")
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        preset = preset_from_mix(name, data, os.fspath(f))
        if preset:
            return preset
    if p.is_file() and p.suffix != ".json":
        preset = preset_from_mix(name, load_task_model(p), os.fspath(p))
        if preset:
            return preset
    raise InputError(f"--preset {name}={path}: found no learned mix (JSON with 'scalar_parameters' or 'weights' "
                     "and 'gamma', or a task model trained with ELMo)")


class TaggerView:
    """A task tagger as the lab uses it; checks what it returns so the page never shows junk.

    Calls are serialised: a task model may change itself while predicting (e.g. growing its word
    table for new words), and requests run in parallel threads.
    """

    def __init__(self, model: Any, source: str = ""):
        if not callable(getattr(model, "predict", None)):
            raise ModelFileError(f"{source}: the loaded task model has no predict(tokens) method")
        self.model = model
        self.source = source
        self._lock = threading.Lock()

    def predict(self, tokens: list[str]) -> list[str]:
        with self._lock:
            tags = list(self.model.predict(tokens))
        if len(tags) != len(tokens):
            raise ModelFileError(f"{self.source}: predict() gave {len(tags)} tags for {len(tokens)} tokens")
        return [str(t) for t in tags]

    def input_parts(self, tokens: list[str]) -> dict[str, np.ndarray] | None:
        fn = getattr(self.model, "input_parts", None)
        if not callable(fn):
            return None
        with self._lock:
            parts = fn(tokens)
        return {k: np.asarray(v.detach().cpu() if hasattr(v, "detach") else v, dtype=np.float32)
                for k, v in parts.items() if k in ("word", "elmo")}

    def mix(self, name: str) -> MixPreset | None:
        if callable(getattr(self.model, "layer_weights", None)):
            return preset_from_mix(name, self.model, self.source)
        return preset_from_mix(name, getattr(self.model, "scalar_mix", None), self.source)


def tagger_view(path: str | os.PathLike) -> TaggerView:
    """The lab's view of a tagger saved by `elmo task train --save` (elmo.tasks.load_tagger)."""
    return TaggerView(load_tagger(path), os.fspath(path))
