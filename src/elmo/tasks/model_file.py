"""The task model file: tensors and plain data only, so that loading it can never run code.

Format elmo-task-model/2 is a torch.save of a dict whose values are str/int/float/bool/None, lists
and dicts of those, and the model's state_dict (tensors); it loads with weights_only=True
(elmo.files.torch_files). Format 1 (older elmo) was read with plain pickle and is refused; a format-1 file
that holds only plain data is re-saved by `python -m elmo.tasks.model_file OLD NEW`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch

from elmo.errors import ElmoError, ModelFileError
from elmo.files.fileio import atomic_path
from elmo.files.torch_files import check_plain, load_torch_file

from .layers import ModelConfig

CHECKPOINT_FORMAT = "elmo-task-model/2"
OLD_FORMATS = ("elmo-task-model/1",)
RESAVE = "python -m elmo.tasks.model_file OLD.pt NEW.pt"
WHAT = f"a task model ({CHECKPOINT_FORMAT}, saved by `elmo task train --save`)"
REFUSED_HINT = ("a task model saved by an older elmo that holds more than plain data cannot be read safely: "
                "train it again with `elmo task train ... --save`")

# ModelConfig's fields: (types allowed, smallest value, largest value) for the numbers
_CONFIG = {
    "kind": (str,), "labels": (list,), "vocab_size": (int, 1, 10**8), "static_dim": (int, 0, 10**5),
    "char_filters": (int, 0, 10**5), "char_dim": (int, 0, 10**4), "hidden": (int, 1, 10**5),
    "num_layers": (int, 1, 100), "dropout": ((int, float), 0, 1), "elmo_layers": (int, 0, 1000),
    "elmo_dim": (int, 0, 10**5), "output_mix": (bool,), "crf": (bool,), "extra": (dict,),
}


def plain(value: Any) -> Any:
    """Numbers of numpy or torch as Python numbers, tuples as lists: what weights_only loading accepts."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


def task_model_state(task: str, cfg: ModelConfig, state_dict: dict, vocab_words: list[str], elmo: dict | None,
                     static: str | None, scalar_mix: Any, metrics: dict) -> dict:
    return {
        "format": CHECKPOINT_FORMAT, "task": task, "config": plain(cfg.to_dict()),
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()}, "vocab": [str(w) for w in vocab_words],
        "elmo": plain(elmo), "static": static, "scalar_mix": plain(scalar_mix), "metrics": plain(metrics),
    }


def write_task_model(path: str | os.PathLike, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def read_task_model(path: str | os.PathLike, accept_old: bool = False) -> dict:
    """The file's dict, every field checked (types, ranges, finite values); else one ModelFileError."""
    path = os.fspath(path)
    state = load_torch_file(path, WHAT, REFUSED_HINT)
    if not isinstance(state, dict):
        raise ModelFileError(f"{path}: expected {WHAT}, found a {type(state).__name__}")
    found = state.get("format")
    if found in OLD_FORMATS and not accept_old:
        raise ModelFileError(f"{path}: a task model of the older format {found}; this elmo reads {CHECKPOINT_FORMAT}. "
                             f"Re-save it: {RESAVE}")
    if found != CHECKPOINT_FORMAT and found not in OLD_FORMATS:
        raise ModelFileError(f"{path}: expected {WHAT}, found format {found!r}")
    check_plain(state, path)
    _field(state, "task", str, path)
    config_dict = _field(state, "config", dict, path)
    state_dict = _field(state, "state_dict", dict, path)
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state_dict.items()):
        raise ModelFileError(f"{path}: 'state_dict' must map names to tensors")
    vocab = _field(state, "vocab", list, path)
    if not all(isinstance(w, str) for w in vocab):
        raise ModelFileError(f"{path}: 'vocab' must be a list of words (str)")
    elmo = _field(state, "elmo", (dict, type(None)), path)
    if elmo is not None and (not isinstance(elmo.get("options_file"), str) or not isinstance(elmo.get("weight_file"), str)
                             or not isinstance(elmo.get("name"), (str, type(None))) or not isinstance(elmo.get("int8", False), bool)
                             or set(elmo) - {"options_file", "weight_file", "name", "int8"}):
        raise ModelFileError(f"{path}: 'elmo' must be null or {{options_file, weight_file, name[, int8]}}, found {elmo!r}")
    _field(state, "static", (str, type(None)), path)
    state.setdefault("scalar_mix", None)
    state.setdefault("metrics", {})
    _field(state, "metrics", dict, path)
    state["config"] = model_config(config_dict, path)
    if state["config"].vocab_size != len(vocab):
        raise ModelFileError(f"{path}: 'config.vocab_size' is {state['config'].vocab_size} but 'vocab' has {len(vocab)} words")
    return state


def _field(state: dict, name: str, types, path: str) -> Any:
    if name not in state:
        raise ModelFileError(f"{path}: missing '{name}' (expected {WHAT})")
    value = state[name]
    if not isinstance(value, types):
        names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise ModelFileError(f"{path}: '{name}' must be {names}, found {type(value).__name__}")
    return value


def model_config(config: dict, path: str) -> ModelConfig:
    """A ModelConfig from the file's 'config', every value's type and range checked first."""
    unknown = sorted(set(config) - set(_CONFIG))
    if unknown:
        raise ModelFileError(f"{path}: 'config' has unknown field {unknown[0]!r}")
    for name, rule in _CONFIG.items():
        if name not in config:
            if name in ("kind", "labels", "vocab_size"):
                raise ModelFileError(f"{path}: 'config' lacks '{name}'")
            continue
        value, types = config[name], rule[0]
        bad_type = not isinstance(value, types) or (isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)))
        if bad_type or (len(rule) == 3 and not rule[1] <= value <= rule[2]):
            wanted = getattr(types, "__name__", "a number") + (f" in [{rule[1]}, {rule[2]}]" if len(rule) == 3 else "")
            raise ModelFileError(f"{path}: 'config.{name}' must be {wanted}, found {value!r}")
    if config["kind"] not in ("tagger", "classifier"):
        raise ModelFileError(f"{path}: 'config.kind' must be 'tagger' or 'classifier', found {config['kind']!r}")
    labels = config["labels"]
    if not labels or not all(isinstance(n, str) for n in labels) or len(set(labels)) != len(labels):
        raise ModelFileError(f"{path}: 'config.labels' must be a non-empty list of distinct label names")
    return ModelConfig(**config)


def resave(old: str, new: str) -> None:
    """A format-1 file that holds only plain data -> format 2 (read with weights_only=True, like any other)."""
    state = read_task_model(old, accept_old=True)
    state["format"] = CHECKPOINT_FORMAT
    state["config"] = plain(state["config"].to_dict())
    if os.path.abspath(old) == os.path.abspath(new):
        raise ModelFileError(f"{new}: the new file must not replace the old one; give another name")
    write_task_model(new, state)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(f"usage: {RESAVE}", file=sys.stderr)
        return 2
    try:
        resave(*args)
    except ElmoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args[1]}: saved as {CHECKPOINT_FORMAT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
