"""What `elmo embed` writes, shared by both writers below it: the one-stream writer (`elmo.embed.stream`) and the
line-range parts joined into one file (`elmo.embed.corpus`).

`OutputSpec` says what one line's dataset holds (layers, pooling, dtype, compression); `check_output` refuses an
OUTPUT that cannot be written before any work; `index_key` and `write_index` make `sentence_to_index`;
`check_sentence_key` guards `--use-sentence-keys`. The layout is AllenNLP's former `allennlp elmo` command's
(docs/format.md 6.2). INPUT's side is `elmo.embed.input_file`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Container
from dataclasses import asdict, dataclass

import h5py
import numpy as np

from elmo.errors import InputError, InputFileNotFound, OutputError
from elmo.files.output_paths import check_not_input

from .embedder import LAYER_CHOICES, select_layers

DTYPES = ("float32", "float16")
POOLS = ("mean", "max")
COMPRESSIONS = ("gzip", "lzf")
INDEX_KEY = "sentence_to_index"
MAX_INDEX_KEY_CHARS = 10_000  # a longer line's `sentence_to_index` key is a prefix and a hash (`index_key`)
INDEX_KEY_PREFIX_CHARS = 200


def index_key(sentence: str) -> str:
    """A stripped line's key in `sentence_to_index`: the line itself (AllenNLP's key) up to
    MAX_INDEX_KEY_CHARS characters; a longer line's key is its first INDEX_KEY_PREFIX_CHARS characters,
    "…sha256:" and the hex sha256 of the whole stripped line's UTF-8 bytes, so the index (held in
    memory until the end) keeps at most about 270 characters of such a line, whatever its length."""
    if len(sentence) <= MAX_INDEX_KEY_CHARS:
        return sentence
    digest = hashlib.sha256(sentence.encode("utf-8")).hexdigest()
    return f"{sentence[:INDEX_KEY_PREFIX_CHARS]}…sha256:{digest}"


@dataclass(frozen=True)
class OutputSpec:
    """What each line's dataset holds, from the model's (L+1, n, D) float32 layers.

    `layers` picks a subset first (e.g. (1, 2)); `output_format` then keeps them all (k, n, D) or
    averages them (n, D) ("top" is the model's top layer and takes no subset); `pool` reduces the n
    tokens to one masked mean or max vector; the result is cast to `dtype` only at the end.
    """

    output_format: str = "all"
    layers: tuple[int, ...] | None = None
    pool: str | None = None
    dtype: str = "float32"
    compression: str | None = None

    def __post_init__(self):
        for name, value, choices in (("output_format", self.output_format, LAYER_CHOICES), ("dtype", self.dtype, DTYPES),
                                     ("pool", self.pool, POOLS + (None,)),
                                     ("compression", self.compression, COMPRESSIONS + (None,))):
            if value not in choices:
                raise InputError(f"{name} must be one of {', '.join(map(str, choices))}; found {value!r}")
        if self.layers is not None:
            if self.output_format == "top":
                raise InputError("--layers and --top do not combine: --top is the model's top layer; "
                                 "use --layers with --all or --average")
            if not self.layers or len(set(self.layers)) != len(self.layers):
                raise InputError(f"--layers must list distinct layer numbers, found {list(self.layers)}")

    def check_model(self, num_layers: int) -> None:
        """The layer subset must exist in a model with `num_layers` (L+1) layers."""
        bad = [k for k in self.layers or () if not 0 <= k < num_layers]
        if bad:
            raise InputError(f"--layers {','.join(map(str, self.layers))}: the model has layers 0..{num_layers - 1} "
                             f"(0 = token layer), found {bad[0]}")

    def apply(self, layers: np.ndarray) -> np.ndarray:
        """(L+1, n, D) float32 -> the array to store for one line."""
        x = select_layers(layers if self.layers is None else layers[list(self.layers)], self.output_format)
        if self.pool is not None:
            if x.shape[-2] == 0:  # an empty line pools to zeros, like Embedder.sentence_vectors
                x = np.zeros(x.shape[:-2] + x.shape[-1:], dtype=x.dtype)
            else:
                x = x.mean(axis=-2) if self.pool == "mean" else x.max(axis=-2)
        return x.astype(self.dtype, copy=False)

    def write(self, group: h5py.Group, key: str, layers: np.ndarray) -> None:
        data = self.apply(layers)
        if self.compression is not None:
            group.create_dataset(key, data=data, compression=self.compression)
            return
        # h5py's low-level calls: the high-level create_dataset costs about twice as much per dataset
        # (0.4 vs 0.25 ms here), and a corpus has one dataset per line.
        space = h5py.h5s.create_simple(data.shape)
        dset = h5py.h5d.create(group.id, key.encode(), h5py.h5t.py_create(data.dtype), space, dcpl=_untimed(),
                               lcpl=link_plist())
        if data.size:
            dset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))

    @property
    def libver(self) -> str | None:
        """HDF5 1.10's format for compressed files: its single-chunk index costs ~300 bytes per dataset,
        not ~2.6 KB; plain files keep the oldest format, readable everywhere (as AllenNLP's were)."""
        return None if self.compression is None else "v110"

    def estimate_bytes(self, num_layers: int, width: int, lines: int, tokens: int) -> int | None:
        """A lower bound on the bytes that `lines` lines of `tokens` tokens take; None when compressed.

        The data, plus 200 bytes of HDF5 per line (200-300 measured): enough to refuse a run that cannot
        fit before it starts, never so much that a run that fits is refused.
        """
        if self.compression is not None:
            return None
        k = 1 if self.output_format != "all" else len(self.layers) if self.layers else num_layers
        vectors = lines if self.pool else tokens
        return vectors * k * width * np.dtype(self.dtype).itemsize + 200 * lines

    def settings(self) -> dict:
        d = asdict(self)
        d["layers"] = None if self.layers is None else list(self.layers)
        return d


@functools.cache
def link_plist() -> h5py.h5p.PropLCID:
    """Link creation as h5py does it: UTF-8 names, and a "/" in a sentence key makes groups (as in AllenNLP)."""
    plist = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    plist.set_create_intermediate_group(True)
    plist.set_char_encoding(h5py.h5t.CSET_UTF8)
    return plist


@functools.cache
def _untimed() -> h5py.h5p.PropDCID:
    """No creation times in the file, as h5py's default: the same input gives the same bytes."""
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_obj_track_times(False)
    return plist


def parse_layers(text: str | None) -> tuple[int, ...] | None:
    """"1,2" -> (1, 2); None stays None."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InputError(f"--layers expects comma-separated layer numbers such as 1,2; found {text!r}") from None


def check_output(output_file: str | os.PathLike, overwrite: bool, input_file: str | os.PathLike | None = None) -> str:
    """OUTPUT must be a file path in an existing directory, new unless `overwrite`, and not INPUT."""
    output_file = os.fspath(output_file)
    if os.path.isdir(output_file):
        raise InputError(f"{output_file}: is a directory; OUTPUT must be a file path")
    check_not_input(output_file, {"INPUT": input_file})
    if os.path.exists(output_file) and not overwrite:
        raise InputError(f"{output_file}: already exists (pass --overwrite to replace it)")
    directory = os.path.dirname(os.path.abspath(output_file))
    if not os.path.isdir(directory):
        raise InputFileNotFound(f"{output_file}: the directory {directory} does not exist")
    check_writable_folder(output_file, directory)
    return output_file


def check_writable_folder(output_file: str, directory: str) -> None:
    """What the OS would refuse later, refused now in one line: a read-only or unwritable folder, no free
    inodes, a name too long once the temporaries' 18 extra bytes are added."""
    vfs = os.statvfs(directory)
    if not os.access(directory, os.W_OK | os.X_OK):
        why = "a read-only file system" if vfs.f_flag & os.ST_RDONLY else "permission denied"
        raise OutputError(f"{output_file}: cannot write in the folder {directory} ({why})")
    if vfs.f_files and not vfs.f_favail:
        raise OutputError(f"{output_file}: the file system of {directory} has no free inodes (no new file can be "
                          "made there); free some, or write OUTPUT elsewhere")
    longest = os.pathconf(directory, "PC_NAME_MAX")
    name = os.path.basename(output_file).encode()
    if len(name) + 18 > longest:
        raise OutputError(f"{output_file}: the file name is {len(name)} bytes; this folder allows {longest}, and "
                          "OUTPUT's temporary files add 18: choose a shorter name")


def remove_temporaries(output_file: str) -> None:
    """`.OUTPUT.<random>.tmp` files of runs that were killed; called with OUTPUT's lock held, so none is live."""
    out_dir, out_name = os.path.split(os.path.abspath(output_file))
    for name in os.listdir(out_dir):
        if name.startswith(f".{out_name}.") and name.endswith(".tmp"):
            os.remove(os.path.join(out_dir, name))


def check_sentence_key(used: Container[str], key: str, source: str, number: int) -> None:
    """With --use-sentence-keys, a line must be non-empty and new (`used`: the keys so far)."""
    if not key:
        raise InputError(f"{source}, line {number + 1}: an empty line cannot be a sentence key "
                         "(drop --use-sentence-keys to key by line number)")
    if key in used:
        raise InputError(f"{source}, line {number + 1}: duplicate sentence, cannot be a key twice: {key!r} "
                         "(drop --use-sentence-keys to key by line number)")


def write_index(out: h5py.Group, texts: dict[str, str]) -> None:
    """`sentence_to_index`: shape (1,), one vlen UTF-8 string holding json.dumps({index_key(sentence): key})."""
    table = out.create_dataset(INDEX_KEY, (1,), dtype=h5py.string_dtype(encoding="utf-8"))
    table[0] = json.dumps(texts)
