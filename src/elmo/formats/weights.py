"""weights.hdf5 in the original layout (doc section 3.2), read and written by one name map."""

from __future__ import annotations

import os

import h5py
import numpy as np
import torch

from elmo.errors import ElmoError, ModelFileError
from elmo.files.fileio import atomic_path, check_file
from elmo.files.hdf5_files import open_hdf5
from elmo.model.allocator import return_freed_memory
from elmo.model.bilm import BiLM
from elmo.model.chars import N_CODES
from elmo.model.int8 import check_kernel, int8_parts, quantize_bilm
from elmo.model.options import BiLMConfig, read_options, write_options

from .int8_store import load_int8


def dataset_map(bilm: BiLM) -> dict[str, tuple[torch.Tensor, tuple[int, ...]]]:
    """Every weights.hdf5 dataset name -> (the parameter holding it, its shape in the file)."""
    enc = bilm.char_encoder
    names: dict[str, tuple[torch.Tensor, tuple[int, ...]]] = {"char_embed": (enc.char_embed, tuple(enc.char_embed.shape))}
    for i, (w, b) in enumerate(zip(enc.conv_weights, enc.conv_biases)):
        names[f"CNN/W_cnn_{i}"] = (w, (1,) + tuple(w.shape))
        names[f"CNN/b_cnn_{i}"] = (b, tuple(b.shape))
    for k in range(bilm.config.n_highway):
        for key, param in (
            ("W_carry", enc.highway_carry_w[k]),
            ("b_carry", enc.highway_carry_b[k]),
            ("W_transform", enc.highway_transform_w[k]),
            ("b_transform", enc.highway_transform_b[k]),
        ):
            names[f"CNN_high_{k}/{key}"] = (param, tuple(param.shape))
    if enc.proj_w is not None:
        names["CNN_proj/W_proj"] = (enc.proj_w, tuple(enc.proj_w.shape))
        names["CNN_proj/b_proj"] = (enc.proj_b, tuple(enc.proj_b.shape))
    for d, stack in enumerate((bilm.forward_lstm, bilm.backward_lstm)):
        for k, layer in enumerate(stack.layers):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell"
            for key in ("W_0", "B", "W_P_0"):
                param = getattr(layer, key)
                if param is not None:
                    names[f"{prefix}/{key}"] = (param, tuple(param.shape))
    return names


def _list_datasets(f: h5py.File) -> list[str]:
    found: list[str] = []
    f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
    return found


def _open_hdf5(path: str) -> h5py.File:
    check_file(path, "a weights.hdf5 file", noun="weight file", error=ModelFileError)
    return open_hdf5(path, "weight file")  # refuses external links, external storage and virtual datasets


def load_bilm(options_file: str | os.PathLike | BiLMConfig, weight_file: str | os.PathLike | None,
              stateful: bool = False, int8: bool = False) -> BiLM:
    """Build a BiLM from local options.json and fill it from local weights.hdf5 (or fresh weights if None).

    Local files only: `elmo.load_bilm` (`elmo.models.load_bilm`) also takes URLs, fetched by the resolver.

    Shapes are checked against the options: a missing, extra or misshapen dataset is an error that
    names the file, the dataset, and the expected and found shapes.

    `int8=True`: for inference with int8 products on the CPU (`elmo.model.int8`), read so that the float32
    weights that int8 replaces are never all held at once, and released (the biLM cannot be saved).
    """
    config = options_file if isinstance(options_file, BiLMConfig) else read_options(options_file)
    if weight_file is None:
        bilm = BiLM(config, stateful=stateful)
        if int8:
            quantize_bilm(bilm, keep_float32=False)
        return bilm
    path = os.fspath(weight_file)
    if int8 and not isinstance(options_file, BiLMConfig):  # quantized once, then read as int8 (int8_store.py)
        return load_int8(options_file, path, stateful, lambda: _load_file(path, config, stateful, int8=True))
    return _load_file(path, config, stateful, int8)


def _load_file(path: str, config: BiLMConfig, stateful: bool, int8: bool) -> BiLM:
    try:
        with _open_hdf5(path) as f:
            return _read_weights(f, path, config, stateful, int8)
    except ElmoError:  # already names the file and what is wrong
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:  # h5py's errors for damaged structure
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise ModelFileError(f"{path}: a damaged HDF5 weight file ({type(e).__name__}: {reason})") from None


def _read_weights(f: h5py.File, path: str, config: BiLMConfig, stateful: bool, int8: bool = False) -> BiLM:
    """The BiLM the options describe, filled from the open weight file, every dataset checked."""
    present = set(_list_datasets(f))
    rows = f["char_embed"].shape[0] if "char_embed" in present else N_CODES
    if rows not in (N_CODES, N_CODES + 1):
        raise ModelFileError(
            f"{path}: dataset 'char_embed' has {rows} rows, expected {N_CODES} (the stored codes) "
            f"or {N_CODES + 1} (with the zero padding row first); found shape {f['char_embed'].shape}"
        )
    with torch.device("meta"):  # every shape is compared with the file before anything is allocated
        expected = dataset_map(BiLM(config, char_rows=rows, initialize=False))
    missing = [name for name in expected if name not in present]
    if missing:
        raise ModelFileError(
            f"{path}: missing dataset '{missing[0]}' (expected shape {expected[missing[0]][1]})"
            + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
            + "; do the options and the weights belong to the same model?"
        )
    extra = sorted(present - set(expected))
    if extra:
        raise ModelFileError(
            f"{path}: dataset '{extra[0]}' is not part of the model the options describe"
            + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
            + f"; options: {len(config.filters)} filter banks, {config.n_highway} highway layers, "
            f"{config.n_layers} LSTM layers, projection {'yes' if config.has_lstm_projection else 'no'}"
        )
    for name, (_, shape) in expected.items():
        if tuple(f[name].shape) != shape:
            raise ModelFileError(f"{path}: dataset '{name}' has shape {tuple(f[name].shape)}, expected {shape} from the options")
    if int8:
        return _read_int8(f, path, config, rows, stateful)
    bilm = BiLM(config, char_rows=rows, stateful=stateful, initialize=False)  # every parameter is read below
    for name, (param, _) in dataset_map(bilm).items():
        _copy_dataset(f, path, name, param)
    return bilm


def _copy_dataset(f: h5py.File, path: str, name: str, param: torch.Tensor) -> None:
    dataset = f[name]
    if not np.issubdtype(dataset.dtype, np.floating):
        raise ModelFileError(f"{path}: dataset '{name}' has dtype {dataset.dtype}, expected float32")
    direct = dataset.dtype == np.float32 and param.dtype == torch.float32 and param.is_contiguous()
    data = param.detach().numpy().reshape(dataset.shape) if direct else dataset[...]
    if direct:  # float32 is read straight into the parameter: no copy of it in between
        dataset.read_direct(data)
    if not np.isfinite(data).all():
        raise ModelFileError(f"{path}: dataset '{name}' contains NaN or infinite values")
    if not direct:  # float16 (the bundled model) or float64, converted by numpy
        with torch.no_grad():
            param.copy_(torch.from_numpy(data.astype(np.float32, copy=False)).reshape(param.shape))


def _read_int8(f: h5py.File, path: str, config: BiLMConfig, rows: int, stateful: bool) -> BiLM:
    """The biLM with int8 products and only the float32 weights that stay float32: built shape-only,
    then one part at a time is given memory, filled from the file and converted (`int8_parts`), so
    the float32 weights of at most one part are held at once."""
    check_kernel()
    with torch.device("meta"):
        bilm = BiLM(config, char_rows=rows, stateful=stateful, initialize=False)
    for part, convert in int8_parts(bilm):
        _allocate(part)
        mine = {id(p) for p in part.parameters()}
        for name, (param, _) in dataset_map(bilm).items():
            if id(param) in mine:
                _copy_dataset(f, path, name, param)
        with torch.no_grad():
            convert(False)
    bilm.float32_released = True
    return_freed_memory()  # the float32 parts, freed between other allocations, leave the process now
    return bilm


def _allocate(part: torch.nn.Module) -> None:
    """Give a shape-only (meta) part uninitialised CPU memory. Not `Module.to_empty`: on meta tensors it
    runs torch._refs.empty_like, which imports sympy (~420 modules, ~35 MB of memory and ~0.5 s)."""
    for module in part.modules():
        for name, p in module.named_parameters(recurse=False):
            setattr(module, name, torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype), p.requires_grad))
        for name, b in module.named_buffers(recurse=False):
            setattr(module, name, torch.empty(b.shape, dtype=b.dtype))


def save_weights(bilm: BiLM, weight_file: str | os.PathLike, float16: bool = False) -> None:
    """Write weights.hdf5 in the original layout: float32, contiguous, no attributes, no softmax.

    `float16` halves the file (the bundled model fits its size budget that way); `load_bilm` reads
    it back as float32. The original tools expect float32 files.
    """
    if bilm.config.token_input is not None:
        raise ModelFileError(f"{os.fspath(weight_file)}: this model reads its own character/word lexicons "
                             "(ELMoForManyLangs), which options.json + weights.hdf5 cannot describe; not written")
    if getattr(bilm, "float32_released", False):
        raise ModelFileError(f"{os.fspath(weight_file)}: this biLM was loaded for int8 inference and holds int8 "
                             "weights only; load the model without int8 to save it; not written")
    with atomic_path(weight_file) as tmp, h5py.File(tmp, "w") as f:
        for name, (param, shape) in dataset_map(bilm).items():
            f.create_dataset(name, data=param.detach().to("cpu", torch.float16 if float16 else torch.float32).numpy().reshape(shape))


def save_bilm(bilm: BiLM, options_file: str | os.PathLike, weight_file: str | os.PathLike, float16: bool = False) -> None:
    """Write options.json + weights.hdf5 so that `load_bilm` gives back identical outputs (folders are
    created); with `float16`, the weights rounded to float16."""
    for path in (options_file, weight_file):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_options(bilm.config, options_file)
    save_weights(bilm, weight_file, float16=float16)

