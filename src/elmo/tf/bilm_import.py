"""bilm-tf checkpoints as models: `elmo import-tf` writes the model directory bilm-tf's `dump_weights` would, plus what
it leaves out (the softmax, the vocabulary), so the checkpoint's language model scores text and trains on here.

The names are mapped exactly as `dump_weights` maps its trainable variables (docs/format.md section 3.4): the `lm/`
scope dropped, `rnn`/`multi_rnn_cell`/`cell_`/`lstm_cell` renamed, `kernel`/`bias`/`projection/kernel` to
`W_0`/`B`/`W_P_0`; optimizer slots (`/Adagrad`), `global_step` and `train_perplexity` are not weights.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from elmo.errors import ModelFileError, ModelFileNotFound
from elmo.files.fileio import atomic_dir
from elmo.files.layout import OPTIONS_NAME, SOFTMAX_NAME, VOCAB_NAME, WEIGHTS_NAME
from elmo.files.output_paths import check_not_input
from elmo.model.chars import N_CODES
from elmo.model.options import BiLMConfig

from .checkpoint import TFCheckpoint, latest_checkpoint

SCOPE = "lm/"
SOFTMAX_W, SOFTMAX_B = "lm/softmax/W", "lm/softmax/b"
OPTIMIZER_SLOTS = ("/Adagrad",)
RNN_RENAMES = [("/rnn/", "/RNN/"), ("/multi_rnn_cell/", "/MultiRNNCell/"), ("/cell_", "/Cell"),
               ("/lstm_cell/", "/LSTMCell/")]


def dump_weights_name(tf_name: str) -> str | None:
    """The weights.hdf5 dataset bilm-tf's `dump_weights` writes for a checkpoint variable; None if it skips it."""
    if not tf_name.startswith(SCOPE) or tf_name.endswith(OPTIMIZER_SLOTS) or "softmax" in tf_name:
        return None
    name = tf_name[len(SCOPE):]
    for old, new in RNN_RENAMES:
        name = name.replace(old, new)
    if "/RNN/" in name:
        if "projection" in name:
            name = name.replace("projection/kernel", "W_P_0")
        else:
            name = re.sub("/kernel$", "/W_0", name)
            name = re.sub("/bias$", "/B", name)
    return name


@dataclass(frozen=True)
class BilmCheckpoint:
    """A bilm-tf checkpoint with the options.json it was trained with and, for the softmax, its vocabulary."""
    prefix: Path
    options_file: Path
    vocab_file: Path | None


def find_bilm_checkpoint(reference: str | os.PathLike, options: str | os.PathLike | None = None,
                         vocab: str | os.PathLike | None = None) -> BilmCheckpoint:
    """A checkpoint prefix (or one of its files), or a bilm-tf run directory (its newest checkpoint). Without
    `options`, the options.json beside the checkpoint; without `vocab`, a vocab.txt beside it, if any."""
    path = Path(reference)
    prefix = latest_checkpoint(path) if path.is_dir() else TFCheckpoint(path).prefix  # or the reason it is none
    directory = path if path.is_dir() else prefix.parent  # bilm-tf reads the options beside the folder it is given
    options_file = Path(options) if options else directory / OPTIONS_NAME
    if not options_file.is_file():
        raise ModelFileNotFound(f"{options_file}: not found; a bilm-tf checkpoint needs the options.json it was trained "
                             f"with (bilm-tf writes it to the run directory; pass --options)")
    beside = directory / "vocab.txt"
    vocab_file = Path(vocab) if vocab else beside if beside.is_file() else None
    return BilmCheckpoint(prefix, options_file, vocab_file)


def read_training_options(path: Path) -> dict:
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFileError(f"{path}: cannot read bilm-tf's options.json: {e}") from e
    if not isinstance(options, dict) or "lstm" not in options:
        raise ModelFileError(f"{path}: not bilm-tf options (expected an object with 'lstm' and 'char_cnn')")
    if "char_cnn" not in options:
        raise ModelFileError(f"{path}: a word-input bilm-tf model (no 'char_cnn'); only character models are read")
    return options


def prediction_options(options: dict) -> dict:
    """The options.json bilm-tf's README asks for at prediction: `lstm` and `char_cnn`, `n_characters` 262 (the
    training char table's 261 rows plus the padding row prepended at load; as `elmo export` writes it)."""
    out = {"lstm": copy.deepcopy(options["lstm"]), "char_cnn": copy.deepcopy(options["char_cnn"])}
    out["char_cnn"]["n_characters"] = N_CODES + 1
    return out


def biLM_tensors(ckpt: TFCheckpoint) -> dict[str, str]:
    """weights.hdf5 name -> checkpoint name, for every variable dump_weights writes."""
    mapped = {}
    for name in ckpt.names():
        out = dump_weights_name(name)
        if out is not None:
            mapped[out] = name
    if "char_embed" not in mapped or not any(n.startswith("RNN_") for n in mapped):
        raise ModelFileError(f"{ckpt.prefix}: not a bilm-tf character model's checkpoint (no lm/char_embed or "
                             f"lm/RNN_* variables among its {len(ckpt.entries)} tensors)")
    return mapped


def check_floats(ckpt: TFCheckpoint, names) -> None:
    """Every variable that becomes a weight holds floats (an int32 tensor's bytes are not weights)."""
    for name in names:
        entry = ckpt.entry(name)
        if not entry.is_float:
            raise ModelFileError(f"{ckpt.prefix}: variable {name!r} is {entry.dtype}, expected floats")


def check_against_options(ckpt: TFCheckpoint, mapped: dict[str, str], options: dict, options_file: Path) -> BiLMConfig:
    """Every biLM variable's shape against the model the options describe, and the softmax's against it, from the
    index alone (nothing read, nothing allocated): options of another model are refused before anything is written."""
    from elmo.formats.weights import dataset_map
    from elmo.model.bilm import BiLM

    config = BiLMConfig.from_options(options, source=str(options_file))
    char_shape = ckpt.entry(mapped["char_embed"]).shape
    rows = char_shape[0] if len(char_shape) == 2 and char_shape[0] in (N_CODES, N_CODES + 1) else N_CODES
    with torch.device("meta"):
        shape_only = BiLM(config, char_rows=rows, initialize=False)  # initialising meta tensors imports torch._dynamo
        expected = {name: shape for name, (_, shape) in dataset_map(shape_only).items()}
    question = f"is {options_file} the options.json this checkpoint was trained with?"
    missing = sorted(set(expected) - set(mapped))
    if missing:
        raise ModelFileError(f"{ckpt.prefix}: no variable for {missing[0]!r} (shape {list(expected[missing[0]])})"
                             f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}, which the options "
                             f"call for; {question}")
    extra = sorted(set(mapped) - set(expected))
    if extra:
        raise ModelFileError(f"{ckpt.prefix}: variable {mapped[extra[0]]!r} is not part of the model the options "
                             f"describe{f' (and {len(extra) - 1} more)' if len(extra) > 1 else ''}; {question}")
    for out, shape in sorted(expected.items()):
        found = ckpt.entry(mapped[out]).shape
        if tuple(found) != tuple(shape):
            raise ModelFileError(f"{ckpt.prefix}: variable {mapped[out]!r} has shape {list(found)}, the options call "
                                 f"for {list(shape)} ({out} of weights.hdf5); {question}")
    W, b = ckpt.entry(SOFTMAX_W).shape, ckpt.entry(SOFTMAX_B).shape
    if len(W) != 2 or W[1] != config.projection_dim or tuple(b) != (W[0],):
        raise ModelFileError(f"{ckpt.prefix}: softmax W {list(W)} and b {list(b)}, expected (V, "
                             f"{config.projection_dim}) and (V,) for the options' projection; {question}")
    return config


def write_weights(ckpt: TFCheckpoint, path: Path) -> None:
    """weights.hdf5 as dump_weights writes it: float32 datasets, one per biLM variable, read one at a time."""
    mapped = biLM_tensors(ckpt)
    check_floats(ckpt, mapped.values())
    with h5py.File(path, "w") as f:
        for out, name in sorted(mapped.items()):
            entry = ckpt.entry(name)
            f.create_dataset(out, entry.shape, dtype="float32")[...] = np.asarray(ckpt.read(name), dtype=np.float32)


def check_softmax_present(ckpt: TFCheckpoint) -> None:
    if SOFTMAX_W not in ckpt.entries or SOFTMAX_B not in ckpt.entries:
        raise ModelFileError(f"{ckpt.prefix}: no {SOFTMAX_W} and {SOFTMAX_B} (a checkpoint of bilm-tf's training "
                             f"holds them; with share_embedding_softmax it does not)")


def read_softmax(ckpt: TFCheckpoint) -> tuple[np.ndarray, np.ndarray]:
    """lm/softmax/W (V, P) and b (V,) as float32, without copies (the original's W alone is 1.6 GB)."""
    check_softmax_present(ckpt)
    check_floats(ckpt, (SOFTMAX_W, SOFTMAX_B))
    W, b = (np.asarray(ckpt.read(name), dtype=np.float32) for name in (SOFTMAX_W, SOFTMAX_B))
    if W.ndim != 2 or b.shape != (W.shape[0],):
        raise ModelFileError(f"{ckpt.prefix}: softmax W {W.shape} and b {b.shape} do not fit together")
    for name, values in ((SOFTMAX_W, W), (SOFTMAX_B, b)):
        if not all(np.isfinite(rows).all() for rows in np.array_split(values, max(1, values.shape[0] // 65536))):
            raise ModelFileError(f"{ckpt.prefix}: variable {name!r} holds NaN or infinite values")
    return W, b


def matching_vocab(vocab_file: Path | None, rows: int, prefix: Path):
    """The vocabulary (if given), checked to have one word per softmax row."""
    from elmo.formats.lm_vocab import Vocab

    vocab = Vocab.load(vocab_file) if vocab_file is not None else None
    if vocab is not None and len(vocab) != rows:
        raise ModelFileError(f"{vocab_file}: {len(vocab)} words, but the softmax of {prefix} has {rows} rows: is it "
                             f"the vocabulary the model was trained with?")
    return vocab


def write_softmax(W: np.ndarray, b: np.ndarray, path: Path) -> None:
    """softmax.hdf5 in the layout `elmo export` writes (elmo.training.softmax.save_softmax): float32 W and b."""
    with h5py.File(path, "w") as f:
        f.create_dataset("W", data=W)
        f.create_dataset("b", data=b)


def import_bilm_checkpoint(source: BilmCheckpoint, out_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write OUT: options.json (for prediction), weights.hdf5, softmax.hdf5 and (when known) vocab.txt, atomically.
    Without vocab.txt, scoring text needs the training vocabulary given again (`elmo perplexity --vocab`)."""
    from elmo.formats.lm_vocab import write_vocab
    from elmo.formats.weights import load_bilm

    check_not_input(out_dir, {"CKPT_PREFIX": str(source.prefix), "--options": source.options_file,
                              "--vocab": source.vocab_file}, flag="OUT", folder=True)
    out = Path(out_dir)
    names = (OPTIONS_NAME, WEIGHTS_NAME, SOFTMAX_NAME, VOCAB_NAME)
    present = [n for n in names if (out / n).exists()]
    if present and not overwrite:
        raise ModelFileError(f"{out}: already holds {', '.join(present)}; pass --overwrite to replace them")
    options = prediction_options(read_training_options(source.options_file))
    ckpt = TFCheckpoint(source.prefix)
    check_softmax_present(ckpt)
    mapped = biLM_tensors(ckpt)
    check_floats(ckpt, [*mapped.values(), SOFTMAX_W, SOFTMAX_B])
    check_against_options(ckpt, mapped, options, source.options_file)
    W, b = read_softmax(ckpt)
    vocab = matching_vocab(source.vocab_file, W.shape[0], ckpt.prefix)
    with atomic_dir(out, replace=names) as tmp:
        (Path(tmp) / OPTIONS_NAME).write_text(json.dumps(options, indent=1) + "\n", encoding="utf-8")
        write_weights(ckpt, Path(tmp) / WEIGHTS_NAME)
        write_softmax(W, b, Path(tmp) / SOFTMAX_NAME)
        if vocab is not None:
            write_vocab(vocab.tokens, Path(tmp) / VOCAB_NAME)
        try:  # what first use will do: it loads, or nothing is kept
            load_bilm(Path(tmp) / OPTIONS_NAME, Path(tmp) / WEIGHTS_NAME)
        except ModelFileError as e:
            raise ModelFileError(f"{source.prefix}: imported, it does not load, so nothing was written: "
                                 + str(e).replace(f"{tmp}{os.sep}", "")) from None
    return out
