"""The one way this package reads a torch-saved file: torch's weights_only unpickler, never plain pickle.

weights_only=True lets a file hold tensors and plain data (dict, list, tuple, str, int, float, bool,
None) and nothing that can run code: a pickle that names any other callable (os.system, eval, a class
with __reduce__) is refused before anything is called. Every failure, whatever torch raises for bytes
that are not such a file, becomes one `ModelFileError` naming the file and what was expected.
"""

from __future__ import annotations

import math
import os
import pickle
import zipfile
from typing import Any

import torch

from elmo.errors import ModelFileError

from .fileio import check_file

PLAIN = (str, int, float, bool, type(None))


def load_torch_file(path: str | os.PathLike, what: str, hint: str = "") -> Any:
    """torch.load(path, weights_only=True) with one clear error; `hint` follows a refusal (how to re-save)."""
    path = check_file(path, what, noun=what, error=ModelFileError)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "global" in str(e).lower():  # weights_only refused to call or build something the file names
            raise ModelFileError(f"{path}: refused: loading it would run code named in the file "
                                 f"({_unsupported(e)}), and {what} holds only tensors and plain data"
                                 + (f"; {hint}" if hint else "")) from None
        raise ModelFileError(f"{path}: not {what} (unreadable pickle data: {_unsupported(e)})") from None
    except MemoryError:
        raise ModelFileError(f"{path}: not {what} (its sizes do not fit in memory)") from None
    except Exception as e:
        raise ModelFileError(f"{path}: not {what} saved by torch.save ({_what_went_wrong(path, e)})") from None


def _what_went_wrong(path: str, error: BaseException) -> str:
    """Torch's reason, or for bytes that are neither a torch zip nor a pickle, what they start with."""
    with open(path, "rb") as f:
        head = f.read(16)
    if not zipfile.is_zipfile(path) and not head.startswith(b"\x80"):
        return f"it starts with {head!r}: neither a torch zip archive nor a pickle"
    return f"{type(error).__name__}: {_first_line(error)}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def _unsupported(error: BaseException) -> str:
    """torch's long weights_only message, cut to the global it refused."""
    for line in str(error).splitlines():
        line = line.strip()
        if "GLOBAL" in line or "Unsupported" in line:
            return line if len(line) <= 160 else line[:157] + "..."
    return _first_line(error)


def check_plain(value: Any, path: str | os.PathLike, where: str = "the file") -> None:
    """Only tensors and plain data, all of it finite: what a file of this package may hold."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise ModelFileError(f"{os.fspath(path)}: {where} holds NaN or infinite values")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ModelFileError(f"{os.fspath(path)}: {where} is {value}, expected a finite number")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, PLAIN):
                raise ModelFileError(f"{os.fspath(path)}: {where} has a key of type {type(key).__name__}")
            check_plain(item, path, f"{where}[{key!r}]" if where != "the file" else repr(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_plain(item, path, f"{where}[{i}]")
    elif not isinstance(value, PLAIN):
        raise ModelFileError(f"{os.fspath(path)}: {where} is a {type(value).__name__}, expected tensors and plain data")
