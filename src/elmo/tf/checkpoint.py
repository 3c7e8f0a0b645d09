"""TensorFlow V2 checkpoints (`PREFIX.index` + `PREFIX.data-0000K-of-0000N`) read without TensorFlow.

The index lists every tensor (dtype, shape, shard, byte offset, size, masked CRC32C); a tensor is read from its shard
with one seek and checked against its CRC, so a 4 GB checkpoint is read tensor by tensor, never all at once.
What is not read is refused with a clear `ModelFileError`: V1 checkpoints, sliced (partitioned) tensors,
compressed index blocks, big-endian bundles, damaged files.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np

from elmo.errors import ModelFileError

from .proto import BundleHeader, TensorEntry, parse_entry, parse_header
from .table import Table, mask_crc, read_varint

CHUNK_BYTES = 1 << 24  # a large tensor is read and checksummed 16 MiB at a time
READABLE_VERSION = 1  # tensor_bundle.h: kTensorBundleVersion
MAX_DIMENSION = 1 << 48  # no real tensor has a dimension this long; bounds the shape arithmetic below
SUFFIXES = re.compile(r"\.(index|meta|data-\d{5}-of-\d{5})$")


def checkpoint_prefix(path: str | Path) -> Path:
    """The prefix of a checkpoint named by its prefix or by one of its files (.index, .data-…, .meta)."""
    path = Path(path)
    return path.with_name(SUFFIXES.sub("", path.name))


def is_checkpoint_prefix(path: str | Path) -> bool:
    prefix = checkpoint_prefix(path)
    return bool(prefix.name) and prefix.with_name(prefix.name + ".index").is_file()


def _missing_index(prefix: Path) -> ModelFileError:
    if prefix.is_file():
        return ModelFileError(f"{prefix}: a TensorFlow V1 checkpoint (one file, no {prefix.name}.index); only V2 "
                              f"checkpoints (TensorFlow >= 0.12's default) are read: re-save it with TensorFlow's "
                              f"tf.compat.v1.train.Saver(write_version=tf.compat.v1.train.SaverDef.V2)")
    return ModelFileError(f"{prefix}: no TensorFlow checkpoint here (expected {prefix.name}.index beside its "
                          f"{prefix.name}.data-00000-of-0000N files)")


class TFCheckpoint:
    """The tensors of one V2 checkpoint by name: `names()`, `entry(name)`, `read(name)` -> numpy array."""

    def __init__(self, prefix: str | Path) -> None:
        self.prefix = checkpoint_prefix(prefix)
        self.index_path = self.prefix.with_name(self.prefix.name + ".index")
        if not self.index_path.is_file():
            raise _missing_index(self.prefix)
        table = Table(self.index_path)
        self._crc32c = table.crc32c
        self.header, self.entries = self._read_index(table)

    def _read_index(self, table: Table) -> tuple[BundleHeader, dict[str, TensorEntry]]:
        where = str(self.index_path)
        header, entries = None, {}
        for key, value in table.items():
            if key == b"":
                header = parse_header(value, f"{where}: bundle header")
                continue
            if key.startswith(b"\x00"):  # one slice of a partitioned tensor (an OrderedCode key); refused below
                continue
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError:
                raise ModelFileError(f"{where}: a tensor name is not UTF-8 ({key[:40]!r}); the file is damaged") from None
            entries[name] = parse_entry(name, value, f"{where}: tensor {name!r}")
        if header is None:
            raise ModelFileError(f"{where}: no bundle header (the empty key); a TensorFlow V1 checkpoint table or a "
                                 f"damaged V2 index")
        self._check_header(header, entries)
        return header, entries

    def _check_header(self, header: BundleHeader, entries: dict[str, TensorEntry]) -> None:
        where = str(self.index_path)
        if header.big_endian:
            raise ModelFileError(f"{where}: a big-endian checkpoint; only little-endian ones are read")
        if header.min_consumer > READABLE_VERSION:
            raise ModelFileError(f"{where}: bundle format version {header.min_consumer} or later needed to read it; "
                                 f"this reader reads version {READABLE_VERSION}")
        if not 1 <= header.num_shards <= 99999:
            raise ModelFileError(f"{where}: the header claims {header.num_shards} data shards (damaged)")
        for entry in entries.values():
            if entry.sliced:
                raise ModelFileError(f"{where}: tensor {entry.name!r} is saved in slices (a partitioned variable); "
                                     f"sliced tensors are not read: save it unpartitioned")
            if not 0 <= entry.shard < header.num_shards or entry.offset < 0 or entry.size < 0:
                raise ModelFileError(f"{where}: tensor {entry.name!r} points at shard {entry.shard} of "
                                     f"{header.num_shards}, offset {entry.offset}, size {entry.size} (damaged)")
            if any(dim > MAX_DIMENSION for dim in entry.shape):
                raise ModelFileError(f"{where}: tensor {entry.name!r} claims shape {list(entry.shape)}, a dimension "
                                     f"beyond {MAX_DIMENSION:,} (damaged)")
            itemsize = entry.itemsize
            if itemsize is not None and entry.size != entry.count * itemsize:  # exact: Python ints never overflow
                raise ModelFileError(f"{where}: tensor {entry.name!r} ({entry.dtype}, shape {list(entry.shape)}) "
                                     f"should take {entry.count * itemsize} bytes, the index says {entry.size}")
            if itemsize is None and entry.count > entry.size:  # a string takes at least its one-byte length
                raise ModelFileError(f"{where}: string tensor {entry.name!r} of {entry.count} values in "
                                     f"{entry.size} bytes (damaged)")

    def names(self) -> list[str]:
        return sorted(self.entries)

    def entry(self, name: str) -> TensorEntry:
        try:
            return self.entries[name]
        except KeyError:
            raise ModelFileError(f"{self.prefix}: no tensor {name!r} in this checkpoint "
                                 f"({len(self.entries)} tensors)") from None

    def shard_path(self, shard: int) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}.data-{shard:05d}-of-{self.header.num_shards:05d}")

    def read_bytes(self, name: str) -> np.ndarray:
        """The tensor's stored bytes (uint8), read with one seek and checked against its CRC32C."""
        entry = self.entry(name)
        path = self.shard_path(entry.shard)
        self._check_extent(entry, path)
        buffer = np.empty(entry.size, dtype=np.uint8)
        crc = 0
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                for start in range(0, entry.size, CHUNK_BYTES):
                    chunk = buffer[start:start + CHUNK_BYTES]
                    if f.readinto(memoryview(chunk)) != chunk.size:
                        raise ModelFileError(f"{path}: tensor {name!r} (bytes {entry.offset}..."
                                             f"{entry.offset + entry.size}) runs past the end of the file (truncated)")
                    view = chunk.view()
                    view.flags.writeable = False
                    crc = self._crc32c.extend(crc, view)
        except OSError as e:
            raise ModelFileError(f"{path}: cannot read tensor {name!r}: {e.strerror or e}") from e
        if entry.dtype != "string" and mask_crc(crc) != entry.crc32c:
            raise ModelFileError(f"{path}: tensor {name!r} fails its CRC32C check (index {entry.crc32c:#010x}, "
                                 f"data {mask_crc(crc):#010x}): the file is damaged")
        return buffer

    def _check_extent(self, entry: TensorEntry, path: Path) -> None:
        """The bytes the index claims must lie in the data file: checked before a buffer of that size is made."""
        try:
            available = path.stat().st_size
        except OSError as e:
            raise ModelFileError(f"{path}: cannot read tensor {entry.name!r}: {e.strerror or e} (a checkpoint's "
                                 f".data-* files lie beside its .index)") from e
        if entry.offset + entry.size > available:
            raise ModelFileError(f"{path}: tensor {entry.name!r} ({entry.dtype}, shape {list(entry.shape)}) claims "
                                 f"bytes {entry.offset:,}..{entry.offset + entry.size:,}, which runs past the end of the file "
                                 f"({available:,} bytes; truncated, or the index is damaged)")

    def read(self, name: str) -> np.ndarray:
        """The tensor as a numpy array of its dtype (bfloat16 widened exactly to float32; strings as bytes objects)."""
        entry = self.entry(name)
        raw = self.read_bytes(name)
        if entry.dtype == "string":
            return self._strings(entry, raw.tobytes())
        if entry.dtype == "bfloat16":
            widened = raw.view("<u2").astype("<u4") << 16
            return widened.view("<f4").reshape(entry.shape)
        return raw.view(entry.numpy_dtype).reshape(entry.shape)

    def _strings(self, entry: TensorEntry, data: bytes) -> np.ndarray:
        """[varint64 lengths][masked CRC32C of the lengths][bytes]; the entry's CRC covers all three. The lengths
        enter the CRC as little-endian uint32 (uint64 past 4 GiB), as TensorFlow's writer feeds them."""
        where = f"{self.shard_path(entry.shard)}: string tensor {entry.name!r}"
        lengths, pos = [], 0
        for _ in range(entry.count):
            length, pos = read_varint(data, pos, where)
            lengths.append(length)
        crc = self._crc32c.value(b"".join(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n) for n in lengths))
        stored = data[pos:pos + 4]
        if len(stored) < 4 or struct.unpack("<I", stored)[0] != mask_crc(crc):
            raise ModelFileError(f"{where}: the lengths fail their CRC32C check (the file is damaged)")
        crc = self._crc32c.extend(crc, stored)
        pos += 4
        if pos + sum(lengths) != len(data):
            raise ModelFileError(f"{where}: {len(data)} bytes, the lengths say {pos + sum(lengths)} (damaged)")
        crc = self._crc32c.extend(crc, data[pos:])
        if mask_crc(crc) != entry.crc32c:
            raise ModelFileError(f"{where}: fails its CRC32C check (the file is damaged)")
        out = np.empty(entry.count, dtype=object)
        for i, length in enumerate(lengths):
            out[i], pos = data[pos:pos + length], pos + length
        return out.reshape(entry.shape)


def latest_checkpoint(directory: str | Path) -> Path:
    """The newest checkpoint of a training directory, as its `checkpoint` file names it (model_checkpoint_path).

    A name that is relative lies in `directory`; an absolute one (what bilm-tf's Saver writes) is taken as it is,
    unless `directory` holds a checkpoint of that name itself: a copied or moved run reads its own files."""
    directory = Path(directory)
    index = directory / "checkpoint"
    try:
        text = index.read_bytes().decode("utf-8")
    except OSError as e:
        raise ModelFileError(f"{index}: cannot read the checkpoint index file of a TensorFlow run: "
                             f"{e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ModelFileError(f"{index}: not UTF-8 text at byte {e.start}; not the checkpoint index file TensorFlow "
                             f"writes (a text protobuf)") from None
    match = re.search(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\\n]|\\.)*)"', text, re.MULTILINE)
    if not match:
        raise ModelFileError(f'{index}: no line model_checkpoint_path: "..." (not a TensorFlow checkpoint index)')
    name = text_proto_string(match.group(1), f"{index}: model_checkpoint_path")
    named = Path(name)
    if any(ord(c) < 32 for c in name) or named.name in ("", ".", ".."):
        raise ModelFileError(f"{index}: model_checkpoint_path {name!r} does not name a checkpoint prefix")
    own = directory / named.name
    prefix = named if named.is_absolute() else directory / named
    if named.is_absolute() and is_checkpoint_prefix(own):
        prefix = own  # a run directory copied or moved since training: its files are beside the index
    if not is_checkpoint_prefix(prefix):
        raise _missing_index(prefix)
    return prefix


TEXT_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v",
                "\\": b"\\", "'": b"'", '"': b'"', "?": b"?"}


def text_proto_string(quoted: str, where: str) -> str:
    """The string inside a text-format protobuf's quotes, as TensorFlow writes it: C escapes, non-ASCII bytes as
    octal (\\303\\251) or hex escapes of their UTF-8, which is decoded last."""
    out, pos = bytearray(), 0
    while pos < len(quoted):
        char = quoted[pos]
        if char != "\\":
            out += char.encode("utf-8")
            pos += 1
            continue
        escape = quoted[pos + 1:pos + 2]
        octal = re.match(r"[0-7]{1,3}", quoted[pos + 1:pos + 4])
        hexa = re.match(r"[xX]([0-9a-fA-F]{1,2})", quoted[pos + 1:pos + 4])
        if octal and int(octal.group(0), 8) < 256:
            out.append(int(octal.group(0), 8))
            pos += 1 + len(octal.group(0))
        elif hexa:
            out.append(int(hexa.group(1), 16))
            pos += 1 + len(hexa.group(0))
        elif escape in TEXT_ESCAPES:
            out += TEXT_ESCAPES[escape]
            pos += 2
        else:
            raise ModelFileError(f"{where}: the escape {quoted[pos:pos + 4]!r} is not one a text protobuf has "
                                 f"(\\n, \\t, \\\", \\\\, octal \\NNN or hex \\xNN)")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelFileError(f"{where}: its escaped bytes are not UTF-8 (at byte {e.start}: "
                             f"{bytes(out[e.start:e.start + 4])!r})") from None
