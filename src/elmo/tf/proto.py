"""The few protocol buffers of a TensorFlow V2 checkpoint index, parsed by hand from the wire format.

BundleHeaderProto (under the empty key) and BundleEntryProto (one per tensor) with its TensorShapeProto; field
numbers from tensorflow/core/protobuf/tensor_bundle.proto. No protobuf or TensorFlow dependency.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from elmo.errors import ModelFileError

from .table import read_varint

# tensorflow/core/framework/types.proto: DataType -> (name, numpy dtype or None when read specially)
DTYPES: dict[int, tuple[str, np.dtype | None]] = {
    1: ("float32", np.dtype("<f4")), 2: ("float64", np.dtype("<f8")), 3: ("int32", np.dtype("<i4")),
    4: ("uint8", np.dtype("u1")), 5: ("int16", np.dtype("<i2")), 6: ("int8", np.dtype("i1")),
    7: ("string", None), 8: ("complex64", np.dtype("<c8")), 9: ("int64", np.dtype("<i8")),
    10: ("bool", np.dtype("?")), 14: ("bfloat16", None), 17: ("uint16", np.dtype("<u2")),
    18: ("complex128", np.dtype("<c16")), 19: ("float16", np.dtype("<f2")), 22: ("uint32", np.dtype("<u4")),
    23: ("uint64", np.dtype("<u8")),
}
FLOAT_DTYPES = ("float32", "float16", "float64", "bfloat16")
OTHER_DTYPE_NAMES = {11: "qint8", 12: "quint8", 13: "qint32", 15: "qint16", 16: "quint16", 20: "resource",
                     21: "variant"}


def fields(data: bytes, where: str) -> dict[int, list]:
    """Every field of one message: number -> values (ints for varint/fixed, bytes for length-delimited)."""
    out: dict[int, list] = {}
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos, where)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = read_varint(data, pos, where)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(data):
                raise ModelFileError(f"{where}: a fixed-width field runs past the end of its message (damaged)")
            value = struct.unpack_from("<Q" if wire == 1 else "<I", data, pos)[0]
            pos += width
        elif wire == 2:
            size, pos = read_varint(data, pos, where)
            if pos + size > len(data):
                raise ModelFileError(f"{where}: a field of {size} bytes runs past the end of its message (damaged)")
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ModelFileError(f"{where}: protobuf wire type {wire} (field {number}) is not valid here (damaged)")
        if number == 0:
            raise ModelFileError(f"{where}: protobuf field number 0 (damaged)")
        out.setdefault(number, []).append(value)
    return out


def _signed(value: int) -> int:
    """An int64 stored as a 64-bit varint (negative numbers take ten bytes)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _last(found: dict[int, list], number: int, default=0):
    return found[number][-1] if number in found else default


@dataclass(frozen=True)
class BundleHeader:
    num_shards: int
    big_endian: bool
    producer: int
    min_consumer: int


def parse_header(data: bytes, where: str) -> BundleHeader:
    found = fields(data, where)
    version = _last(found, 3, b"")
    if not isinstance(version, bytes):
        raise ModelFileError(f"{where}: the header's version is not a message (damaged)")
    version_fields = fields(version, where)
    return BundleHeader(num_shards=_last(found, 1), big_endian=_last(found, 2) == 1,
                        producer=_last(version_fields, 1), min_consumer=_last(version_fields, 2))


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies: its data shard, byte offset and size, and its masked CRC32C."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int
    sliced: bool

    @property
    def numpy_dtype(self) -> np.dtype | None:
        return next((d for n, d in DTYPES.values() if n == self.dtype), None)

    @property
    def count(self) -> int:
        """The number of values, exact (Python ints: a product of claimed dimensions cannot wrap to 0)."""
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int | None:
        """Bytes per value; None for strings (their bytes have their own lengths)."""
        if self.dtype == "bfloat16":
            return 2
        dtype = self.numpy_dtype
        return None if dtype is None else dtype.itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


def _shape(data: bytes, where: str) -> tuple[int, ...]:
    found = fields(data, where)
    if _last(found, 3):
        raise ModelFileError(f"{where}: the tensor's shape has unknown rank")
    dims = []
    for dim in found.get(2, []):
        if not isinstance(dim, bytes):
            raise ModelFileError(f"{where}: a shape dimension is not a message (damaged)")
        size = _signed(_last(fields(dim, where), 1))
        if size < 0:
            raise ModelFileError(f"{where}: the tensor's shape has a dimension of size {size}")
        dims.append(size)
    return tuple(dims)


def _dtype_name(code: int, where: str) -> str:
    if code in DTYPES:
        return DTYPES[code][0]
    name = OTHER_DTYPE_NAMES.get(code, f"DataType {code}")
    raise ModelFileError(f"{where}: dtype {name} is not read (numeric, bool and string tensors are)")


def parse_entry(name: str, data: bytes, where: str) -> TensorEntry:
    found = fields(data, where)
    shape = _last(found, 2, b"")
    ints = [_last(found, n) for n in (1, 3, 4, 5, 6)]
    if not isinstance(shape, bytes) or not all(isinstance(v, int) for v in ints):
        raise ModelFileError(f"{where}: a field of the tensor's entry has the wrong wire type (damaged)")
    dtype, shard, offset, size, crc = ints
    return TensorEntry(name=name, dtype=_dtype_name(dtype, where), shape=_shape(shape, where), shard=shard,
                       offset=_signed(offset), size=_signed(size), crc32c=crc, sliced=7 in found)
