"""The sorted key/value table of a TensorFlow checkpoint's .index file (LevelDB's format, as TensorFlow writes it).

The layout: data blocks of prefix-compressed entries (varint shared / unshared key lengths, value length), each block
ending in its restart offsets and followed by a 5-byte trailer (compression type, masked CRC32C); an index block whose
values point at the data blocks; a 48-byte footer naming the index block and ending in a magic number. TensorFlow
writes bundles without compression, so a snappy block is refused, not decoded. Every block's checksum is checked.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from elmo.errors import ModelFileError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5
COMPRESSION_NAMES = {1: "snappy", 2: "zlib", 3: "lz4", 4: "zstd"}
CRC_MASK_DELTA = 0xA282EAD8


def crc32c_library():
    """google-crc32c, the maintained CRC32C library (the `tf` extra); a clear error when it is not installed."""
    try:
        import google_crc32c
    except ImportError as e:
        raise ModelFileError("reading TensorFlow checkpoints checks CRC32C checksums with the google-crc32c package, "
                             "which is not installed: pip install 'elmo-bilm[tf]'") from e
    return google_crc32c


def mask_crc(crc: int) -> int:
    """TensorFlow's (and LevelDB's) masked CRC: rotate right by 15 bits and add a constant."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + CRC_MASK_DELTA) & 0xFFFFFFFF


def read_varint(data: bytes, pos: int, where: str, limit: int | None = None) -> tuple[int, int]:
    """A little-endian base-128 varint (at most 64 bits) at `pos`: (value, next position)."""
    end = len(data) if limit is None else limit
    value = shift = 0
    while True:
        if pos >= end:
            raise ModelFileError(f"{where}: a varint runs past the end of its data (the file is truncated or damaged)")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 64:
            raise ModelFileError(f"{where}: a varint longer than 10 bytes (the file is damaged)")


def _block_handle(data: bytes, pos: int, where: str) -> tuple[int, int, int]:
    offset, pos = read_varint(data, pos, where)
    size, pos = read_varint(data, pos, where)
    return offset, size, pos


class Table:
    """The entries of one .index file, read into memory once (an index is small: one entry per tensor)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.data = self.path.read_bytes()
        except OSError as e:
            raise ModelFileError(f"{self.path}: cannot read the checkpoint index: {e.strerror or e}") from e
        self.crc32c = crc32c_library()

    def _fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what}")

    def _footer(self) -> tuple[int, int]:
        data = self.data
        if len(data) < FOOTER_SIZE:
            raise self._fail(f"{len(data)} bytes, too short for a TensorFlow checkpoint index (a table needs a "
                             f"{FOOTER_SIZE}-byte footer)")
        magic = struct.unpack_from("<Q", data, len(data) - 8)[0]
        if magic != TABLE_MAGIC:
            raise self._fail(f"not a TensorFlow V2 checkpoint index (footer magic {magic:#018x}, expected "
                             f"{TABLE_MAGIC:#018x}); the file is damaged, or not an .index file")
        footer = len(data) - FOOTER_SIZE
        _, _, pos = _block_handle(data, footer, str(self.path))  # the metaindex block: TensorFlow leaves it empty
        offset, size, _ = _block_handle(data, pos, str(self.path))
        return offset, size

    def block(self, offset: int, size: int, what: str) -> bytes:
        """The contents of one block, its checksum checked; compressed blocks refused."""
        end = offset + size + BLOCK_TRAILER_SIZE
        if end > len(self.data) - FOOTER_SIZE:
            raise self._fail(f"the {what} block at byte {offset} ({size} bytes) runs past the end of the table "
                             f"({len(self.data)} bytes; the file is truncated or damaged)")
        compression = self.data[offset + size]
        stored = struct.unpack_from("<I", self.data, offset + size + 1)[0]
        actual = mask_crc(self.crc32c.value(self.data[offset:offset + size + 1]))
        if stored != actual:
            raise self._fail(f"the {what} block at byte {offset} fails its CRC32C check (stored {stored:#010x}, "
                             f"computed {actual:#010x}): the file is damaged")
        if compression:
            name = COMPRESSION_NAMES.get(compression, f"type {compression}")
            raise self._fail(f"the {what} block at byte {offset} is {name}-compressed; only uncompressed tables "
                             f"(what TensorFlow's checkpoint writer makes) are read")
        return self.data[offset:offset + size]

    def _entries(self, block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
        where = f"{self.path}: {what} block"
        if len(block) < 4:
            raise self._fail(f"the {what} block has {len(block)} bytes, too few for its restart count")
        restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
        limit = len(block) - 4 - 4 * restarts
        if restarts < 1 or limit < 0:
            raise self._fail(f"the {what} block claims {restarts} restart points in {len(block)} bytes (damaged)")
        pos, key = 0, b""
        while pos < limit:
            shared, pos = read_varint(block, pos, where, limit)
            unshared, pos = read_varint(block, pos, where, limit)
            value_size, pos = read_varint(block, pos, where, limit)
            if shared > len(key) or pos + unshared + value_size > limit:
                raise self._fail(f"an entry of the {what} block at byte {pos} does not fit its block (damaged)")
            key = key[:shared] + block[pos:pos + unshared]
            pos += unshared
            yield key, block[pos:pos + value_size]
            pos += value_size

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) in key order, block by block; keys must increase strictly."""
        offset, size = self._footer()
        previous = None
        for _, handle in self._entries(self.block(offset, size, "index"), "index"):
            block_offset, block_size, _ = _block_handle(handle, 0, f"{self.path}: index entry")
            for key, value in self._entries(self.block(block_offset, block_size, "data"), "data"):
                if previous is not None and key <= previous:
                    raise self._fail(f"keys out of order ({previous!r} then {key!r}): the file is damaged")
                previous = key
                yield key, value
