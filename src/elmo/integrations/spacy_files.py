"""A biLM as bytes inside a saved spaCy pipeline: options.json + weights.hdf5, packed and read back with checks.

Both the `elmo` component (`to_bytes`/`from_bytes`) and the `elmo.ELMoEmbed.v1` layer (its saved attrs) keep the
biLM this way, so a pipeline needs nothing outside itself. Whatever comes back is validated as the files are on
disk (`load_bilm`: options.json checked, every dataset's shape and dtype checked): empty, garbage or mistyped
bytes are one ModelFileError naming `where`, never a KeyError or a msgpack exception.

The weights are written in the precision they were loaded in: float16 when every weight is a float16 value (the
bundled model ships as float16: 10.9 MB, not 21.7 MB of float32), float32 otherwise, so a reloaded pipeline gives
exactly the same vectors.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from elmo.errors import ModelFileError
from elmo.files.layout import OPTIONS_NAME, WEIGHTS_NAME
from elmo.formats.weights import dataset_map, load_bilm, save_bilm
from elmo.model.bilm import BiLM

FILE_NAMES = (OPTIONS_NAME, WEIGHTS_NAME)


def bilm_files(bilm: BiLM, where: str) -> dict[str, bytes]:
    """{options.json: bytes, weights.hdf5: bytes} of `bilm` (ELMoForManyLangs models have no such form)."""
    if bilm.lexicon is not None:
        raise ModelFileError(f"{where}: an ELMoForManyLangs model cannot be written into a spaCy pipeline (its "
                             "lexicon has no options.json + weights.hdf5 form); convert it first")
    with tempfile.TemporaryDirectory() as tmp:
        save_as_loaded(bilm, tmp)
        return {name: (Path(tmp) / name).read_bytes() for name in FILE_NAMES}


def holds_float16(bilm: BiLM) -> bool:
    """Whether every weight is a float16 value (as loaded from a float16 file): then float16 stores it exactly."""
    with torch.no_grad():
        return all(torch.equal(param.to(torch.float16).to(param.dtype), param) for param, _ in dataset_map(bilm).values())


def save_as_loaded(bilm: BiLM, folder: str | os.PathLike) -> None:
    """options.json + weights.hdf5 of `bilm` in `folder`, the weights in the precision they were loaded in."""
    save_bilm(bilm, Path(folder) / OPTIONS_NAME, Path(folder) / WEIGHTS_NAME, float16=holds_float16(bilm))


def check_files(files: object, where: str) -> dict[str, bytes]:
    """`files` as read back: a dict with exactly options.json and weights.hdf5, each non-empty bytes."""
    if not isinstance(files, dict) or set(files) != set(FILE_NAMES):
        found = sorted(map(str, files)) if isinstance(files, dict) else type(files).__name__
        raise ModelFileError(f"{where}: expected the ELMo files {', '.join(FILE_NAMES)}; found {found}")
    for name in FILE_NAMES:
        if not isinstance(files[name], bytes) or not files[name]:
            raise ModelFileError(f"{where}: expected {name} as non-empty bytes; found "
                                 f"{type(files[name]).__name__} of length {len(files[name] or ())}")
    return files


def unpack_files(data: object, where: str) -> dict[str, bytes]:
    """msgpack bytes (from `pack_files`) -> the checked files dict."""
    import srsly

    if not isinstance(data, (bytes, bytearray)) or not data:
        raise ModelFileError(f"{where}: expected the msgpack bytes of an elmo component; found "
                             f"{type(data).__name__} of length {len(data) if hasattr(data, '__len__') else '?'}")
    try:
        files = srsly.msgpack_loads(bytes(data))
    except Exception as e:  # msgpack raises several unrelated types on garbage (FormatError, ExtraData, ...)
        raise ModelFileError(f"{where}: not the msgpack bytes of an elmo component ({type(e).__name__})") from e
    return check_files(files, where)


def pack_files(files: dict[str, bytes]) -> bytes:
    import srsly

    return srsly.msgpack_dumps(files)


def bilm_from_files(files: object, where: str) -> BiLM:
    """Load a BiLM from the files dict, checked; errors name `where`."""
    checked = check_files(files, where)
    with tempfile.TemporaryDirectory() as tmp:
        for name in FILE_NAMES:
            (Path(tmp) / name).write_bytes(checked[name])
        try:
            return load_bilm(Path(tmp) / OPTIONS_NAME, Path(tmp) / WEIGHTS_NAME)
        except ModelFileError as e:
            raise ModelFileError(f"{where}: {str(e).replace(tmp + '/', '')}") from e
