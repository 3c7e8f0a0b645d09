"""int8 weights quantized once and stored, so that an int8 load reads int8 instead of float32.

`load_bilm(options, weights, int8=True)` (`weights.py`) comes here. The first load of a model's files
quantizes as it always did (`elmo.model.int8`) and writes what it made, the int8 weights with their scales
and biases and the weights that stay float32, to

    $ELMO_CACHE/int8/<sha256 of the weight file's real path, 32 hex digits>.int8

(`layout.cache_root`: ~/.cache/elmo on Linux). Later loads read that file: the integers and scales are
the ones quantization made, so the vectors are the same bits as a load that quantizes. What is left of
the load is fbgemm's packing of the weights, which torch cannot store.

A stored file is used only when it is whole and made from these files:
- its own checksum: sha256 of everything before its last 32 bytes, which hold it;
- the source: the fingerprint of options.json + weights.hdf5 (`fingerprints.files_fingerprint`, sha256
  of their bytes) recorded with the files' identity (device, inode, size, modification and change
  times). Where the identity is unchanged the files were not rewritten or replaced since the
  fingerprint was taken, and hashing hundreds of MB at every load is spared; where it changed, the
  files are hashed again: the same fingerprint (a copy, a `touch`) keeps the store (written again
  with the new identity), another one means other weights.
A damaged or stale file is never used: one line on stderr says which and why, the weights are
quantized from the float32 file again and the store replaced. Files are written to a temporary name
and renamed. `ELMO_INT8_STORE=0` turns the store off (every int8 load quantizes); a cache folder that
cannot be written is said once per process and each load then quantizes. Writing a store removes those whose weight file no longer exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from elmo.files.fileio import atomic_path
from elmo.files.layout import cache_root
from elmo.model.allocator import return_freed_memory
from elmo.model.bilm import BiLM
from elmo.model.int8 import ACTIVATION_LEVELS, Int8Linear, check_kernel, int8_parts
from elmo.model.options import read_options

from .fingerprints import files_fingerprint

MAGIC = b"ELMOINT8"
FORMAT = 1
STORE_ENV = "ELMO_INT8_STORE"
QUANTIZATION = {"weights": "int8, one scale per output channel (absmax / 127)",
                "activations": f"int8 per row, |q| <= {ACTIVATION_LEVELS}", "kernel": "fbgemm"}
DTYPES = {"float32": torch.float32, "int8": torch.int8}
_unwritable_said = False


class StoreRejected(Exception):
    """A stored file that must not be used; the message says why (damaged or stale)."""


def store_path(weight_file: str | os.PathLike) -> Path:
    key = hashlib.sha256(os.path.realpath(weight_file).encode("utf-8")).hexdigest()[:32]
    return cache_root() / "int8" / f"{key}.int8"


def enabled() -> bool:
    return os.environ.get(STORE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def identity(options_file: str | os.PathLike, weight_file: str | os.PathLike) -> list[list[int]]:
    """What changes when a file is rewritten or replaced (a `touch` can set back the modification
    time, never the change time)."""
    found = []
    for path in (options_file, weight_file):
        st = os.stat(path)
        found.append([st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    return found


def load_int8(options_file: str | os.PathLike, weight_file: str | os.PathLike, stateful: bool,
              quantize: Callable[[], BiLM]) -> BiLM:
    """The biLM for int8 inference: from the store when it is whole and current, else `quantize()`d
    (the loader that reads the float32 file) and stored for the next load."""
    if not enabled():
        return quantize()
    check_kernel()
    path = store_path(weight_file)
    if path.is_file() and os.path.isfile(weight_file):  # a missing weight file is the loader's error to say
        try:
            bilm, same_identity = read_store(path, options_file, weight_file, stateful)
            if not same_identity:  # the same bytes under a new identity: stored again, so the next load skips the hash
                write_store(bilm, path, options_file, weight_file)
            return bilm
        except StoreRejected as e:
            print(f"elmo: int8 store {path} {e}; quantizing {os.fspath(weight_file)} again and replacing it",
                  file=sys.stderr)
    bilm = quantize()
    write_store(bilm, path, options_file, weight_file)
    return bilm


def write_store(bilm: BiLM, path: Path, options_file: str | os.PathLike, weight_file: str | os.PathLike) -> None:
    """Write an int8-converted biLM's stored form; a folder that cannot be written is said once, not raised."""
    global _unwritable_said
    tensors = [(f"param:{name}", p) for name, p in bilm.state_dict().items()]
    for i, (part, _) in enumerate(int8_parts(bilm)):
        for k, linear in enumerate(part.int8.linears):
            q, scale, bias = linear.quantized()  # q (in, out), stored as (out, in): as fbgemm packs it
            tensors += [(f"int8:{i}:{k}:q", q.t()), (f"int8:{i}:{k}:scale", scale)]
            tensors += [] if bias is None else [(f"int8:{i}:{k}:bias", bias)]
    header = {"format": FORMAT, "quantization": QUANTIZATION,
              "source": {"files": [os.path.realpath(options_file), os.path.realpath(weight_file)],
                         "fingerprint": files_fingerprint(options_file, weight_file),
                         "identity": identity(options_file, weight_file)},
              "tensors": [{"name": name, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
                          for name, t in tensors]}
    head = json.dumps(header).encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            digest = hashlib.sha256()
            for chunk in (MAGIC, len(head).to_bytes(8, "little"), head):
                f.write(chunk)
                digest.update(chunk)
            for _, t in tensors:
                data = memoryview(t.detach().contiguous().numpy()).cast("B")
                f.write(data)
                digest.update(data)
            f.write(digest.digest())
        _prune(path.parent, keep=path)
    except OSError as e:
        if not _unwritable_said:
            print(f"elmo: cannot store int8 weights in {path.parent} ({e.strerror or e}); every int8 load "
                  f"quantizes again (set ELMO_CACHE to a writable folder, or {STORE_ENV}=0)", file=sys.stderr)
            _unwritable_said = True


def _prune(folder: Path, keep: Path) -> None:
    """Remove the stores whose weight file is gone (a model moved or deleted, a test's temporary copy), so
    that the folder does not grow with models that no longer exist; a file that is not ours is left alone."""
    for other in folder.glob("*.int8"):
        if other == keep:
            continue
        try:
            with open(other, "rb") as f:
                start = f.read(16)
                header = json.loads(f.read(int.from_bytes(start[8:], "little"))) if start[:8] == MAGIC else None
            if header is not None and not os.path.exists(header["source"]["files"][1]):
                other.unlink()
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue


def read_store(path: Path, options_file: str | os.PathLike, weight_file: str | os.PathLike,
               stateful: bool) -> tuple[BiLM, bool]:
    """(the biLM, whether the files' identity was the recorded one); raises `StoreRejected`. The whole
    file's checksum is verified before anything read is used."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        start = f.read(16)
        if len(start) < 16 or start[:8] != MAGIC:
            raise StoreRejected("is damaged (not an int8 store)")
        head = f.read(int.from_bytes(start[8:], "little"))
        digest.update(start + head)
        try:
            header = json.loads(head)
            specs = [(t["name"], DTYPES[t["dtype"]], tuple(t["shape"])) for t in header["tensors"]]
            source = header["source"]
        except (ValueError, KeyError, TypeError) as e:
            raise StoreRejected(f"is damaged (its header: {type(e).__name__})") from None
        if header.get("format") != FORMAT or header.get("quantization") != QUANTIZATION:
            raise StoreRejected("was written by another version of elmo (format or quantization differs)")
        same_identity = source.get("identity") == identity(options_file, weight_file)
        if not same_identity and source.get("fingerprint") != files_fingerprint(options_file, weight_file):
            raise StoreRejected("is stale: it was made from other weights (the files' fingerprint differs)")
        tensors = {}
        for name, dtype, shape in specs:
            t = torch.empty(shape, dtype=dtype)
            data = memoryview(t.numpy()).cast("B")
            if f.readinto(data) != len(data):
                raise StoreRejected("is damaged (truncated)")
            digest.update(data)
            tensors[name] = t
        if f.read(33) != digest.digest():
            raise StoreRejected("is damaged (its checksum does not match its contents)")
    return _build(tensors, options_file, stateful), same_identity


def _build(tensors: dict[str, torch.Tensor], options_file: str | os.PathLike, stateful: bool) -> BiLM:
    """The int8-only biLM from a stored file's tensors (checked already): shape-only, then each part's
    float32 weights set and its int8 products packed."""
    params = {name.removeprefix("param:"): t for name, t in tensors.items() if name.startswith("param:")}
    char_embed = params.get("char_encoder.char_embed")
    if char_embed is None:
        raise StoreRejected("is damaged (no character embedding)")
    with torch.device("meta"):
        bilm = BiLM(read_options(options_file), char_rows=char_embed.shape[0], stateful=stateful, initialize=False)
    expected = {name: tuple(p.shape) for name, p in bilm.state_dict().items()}
    if set(expected) != set(params):
        raise StoreRejected("was made for another architecture (its weights' names differ from the options')")
    for name, t in params.items():
        if t.numel() == 0:  # a float32 weight that int8 replaces: released below, by `convert`
            continue
        if tuple(t.shape) != expected[name]:
            raise StoreRejected(f"was made for another architecture ({name} has shape {tuple(t.shape)}, "
                                f"the options say {expected[name]})")
        module, _, leaf = name.rpartition(".")
        setattr(bilm.get_submodule(module), leaf, torch.nn.Parameter(t))
    for i, (_, convert) in enumerate(int8_parts(bilm)):
        linears, k = [], 0
        while f"int8:{i}:{k}:q" in tensors:
            bias = tensors.get(f"int8:{i}:{k}:bias")
            q = tensors.pop(f"int8:{i}:{k}:q").t()  # (in, out), a view: packed without a copy
            linears.append(Int8Linear.from_quantized(q, tensors[f"int8:{i}:{k}:scale"], bias))
            k += 1
        with torch.no_grad():
            convert(False, linears)
    if any(p.is_meta for p in bilm.parameters()):
        raise StoreRejected("is damaged (a weight is missing)")
    bilm.float32_released = True
    return_freed_memory()
    return bilm
