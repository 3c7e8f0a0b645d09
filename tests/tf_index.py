"""Writes TensorFlow checkpoint .index files whose checksums are valid, so a test can make an index lie (a claimed
size, shape or dtype) and reach the checks behind the CRCs. The table layout is elmo.tf.table's, written simply:
one data block, no key prefix sharing, a restart point at every entry."""

from __future__ import annotations

import struct
from pathlib import Path

from elmo.tf.proto import DTYPES, TensorEntry
from elmo.tf.table import FOOTER_SIZE, TABLE_MAGIC, Table, crc32c_library, mask_crc

DTYPE_CODES = {name: code for code, (name, _) in DTYPES.items()}


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values take ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_int(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def field_bytes(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value


def entry_bytes(dtype: int, shape, shard: int, offset: int, size: int, crc: int) -> bytes:
    """A BundleEntryProto (tensor_bundle.proto): dtype, shape, shard_id, offset, size, crc32c (fixed32)."""
    dims = b"".join(field_bytes(2, field_int(1, d)) for d in shape)
    return (field_int(1, dtype) + field_bytes(2, dims) + field_int(3, shard) + field_int(4, offset)
            + field_int(5, size) + varint(6 << 3 | 5) + struct.pack("<I", crc))


def entry_of(entry: TensorEntry, **changes) -> bytes:
    fields = {"dtype": DTYPE_CODES[entry.dtype], "shape": entry.shape, "shard": entry.shard, "offset": entry.offset,
              "size": entry.size, "crc": entry.crc32c}
    fields.update(changes)
    return entry_bytes(**fields)


def _block(items: list[tuple[bytes, bytes]]) -> bytes:
    out, restarts = bytearray(), []
    for key, value in items:
        restarts.append(len(out))
        out += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    restarts = restarts or [0]
    return bytes(out) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def write_table(path: Path, items: list[tuple[bytes, bytes]]) -> None:
    """An .index holding `items` (sorted by key), every block's masked CRC32C correct."""
    crc = crc32c_library()
    data = bytearray()

    def add(block: bytes) -> tuple[int, int]:
        offset = len(data)
        data.extend(block + b"\0" + struct.pack("<I", mask_crc(crc.value(block + b"\0"))))
        return offset, len(block)

    items = sorted(items)
    data_handle = add(_block(items))
    meta_handle = add(_block([]))
    index_handle = add(_block([(items[-1][0], varint(data_handle[0]) + varint(data_handle[1]))]))
    handles = b"".join(varint(n) for n in (*meta_handle, *index_handle))
    data.extend(handles.ljust(FOOTER_SIZE - 8, b"\0") + struct.pack("<Q", TABLE_MAGIC))
    Path(path).write_bytes(bytes(data))


def read_items(path: Path) -> list[tuple[bytes, bytes]]:
    return list(Table(path).items())
