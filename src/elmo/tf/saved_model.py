"""The graph of a TensorFlow SavedModel (saved_model.pb) read without TensorFlow: node names, ops, inputs, the
attributes a TF-Hub ELMo module's settings are read from, and the signatures.

Field numbers from tensorflow/core/protobuf/saved_model.proto, meta_graph.proto and framework/{graph,node_def,
attr_value,tensor}.proto. Only what elmo.tf.hub_import asks for is decoded; the rest is skipped.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from elmo.errors import ModelFileError, ModelFileNotFound

from .proto import fields
from .table import read_varint

MAX_GRAPH_BYTES = 1 << 30  # far above a graph whose weights live in variables/, as TF-Hub's do


@dataclass(frozen=True)
class Node:
    """One NodeDef: name, op type, inputs (control inputs keep their leading ^), and its raw attributes."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict[str, bytes] = field(repr=False)

    def ints(self, attr: str) -> list[int]:
        """A list(int) attribute (MaxPool's ksize), [] if absent."""
        if attr not in self.attrs:
            return []
        where = f"node {self.name!r} attribute {attr!r}"
        listed = fields(self.attrs[attr], where).get(1, [b""])[-1]
        return _varints(fields(listed, where).get(3, []), where)

    def scalar(self) -> float | None:
        """The value of a one-element float or int Const, else None."""
        if self.op != "Const" or "value" not in self.attrs:
            return None
        where = f"node {self.name!r}"
        tensor = fields(self.attrs["value"], where).get(8, [b""])[-1]
        found = fields(tensor, where)
        if 4 in found and len(found[4][-1]) == 4:  # tensor_content: one little-endian float32
            return struct.unpack("<f", found[4][-1])[0] if found.get(1, [1])[-1] == 1 else None
        if 5 in found:  # float_val, packed (4 bytes each) or not (a fixed32)
            value = found[5][-1]
            if isinstance(value, bytes):
                return struct.unpack("<f", value[-4:])[0] if len(value) >= 4 else None
            return struct.unpack("<f", struct.pack("<I", value & 0xFFFFFFFF))[0]
        if 7 in found:
            return float(_varints(found[7], where)[-1])
        return None


@dataclass(frozen=True)
class MetaGraph:
    tags: tuple[str, ...]
    nodes: dict[str, Node]
    signatures: dict[str, dict[str, dict[str, str]]]  # name -> {"inputs"|"outputs": key -> tensor name}


def _varints(values: list, where: str) -> list[int]:
    """Repeated int64 values, packed (one bytes field) or not."""
    out = []
    for value in values:
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            number, pos = read_varint(value, pos, where)
            out.append(number)
    return out


def _text(value, where: str) -> str:
    if not isinstance(value, bytes):
        raise ModelFileError(f"{where}: a name is not a string (not a SavedModel graph)")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelFileError(f"{where}: a name is not UTF-8 (not a SavedModel graph)") from None


def _map(entries: list, where: str) -> dict[str, bytes]:
    out = {}
    for entry in entries:
        if not isinstance(entry, bytes):
            raise ModelFileError(f"{where}: a map entry is not a message (not a SavedModel graph)")
        found = fields(entry, where)
        value = found.get(2, [b""])[-1]
        out[_text(found.get(1, [b""])[-1], where)] = value if isinstance(value, bytes) else b""
    return out


def _node(data, where: str) -> Node:
    if not isinstance(data, bytes):
        raise ModelFileError(f"{where}: a graph node is not a message (not a SavedModel graph)")
    found = fields(data, where)
    name = _text(found.get(1, [b""])[-1], where)
    return Node(name=name, op=_text(found.get(2, [b""])[-1], where),
                inputs=tuple(_text(v, where) for v in found.get(3, [])), attrs=_map(found.get(5, []), where))


def _signatures(entries: list, where: str) -> dict[str, dict[str, dict[str, str]]]:
    out = {}
    for name, signature in _map(entries, where).items():
        found = fields(signature, where)
        out[name] = {role: {key: _text(fields(info, where).get(1, [b""])[-1], where)
                            for key, info in _map(found.get(number, []), where).items()}
                     for role, number in (("inputs", 1), ("outputs", 2))}
    return out


def _meta_graph(data, where: str) -> MetaGraph:
    if not isinstance(data, bytes):
        raise ModelFileError(f"{where}: a meta graph is not a message (not a SavedModel)")
    found = fields(data, where)
    info = fields(found.get(1, [b""])[-1], where) if isinstance(found.get(1, [b""])[-1], bytes) else {}
    graph = found.get(2, [None])[-1]
    if not isinstance(graph, bytes):
        raise ModelFileError(f"{where}: a meta graph without a graph (not a SavedModel)")
    nodes = {}
    for data in fields(graph, where).get(1, []):
        node = _node(data, where)
        nodes[node.name] = node
    return MetaGraph(tags=tuple(_text(t, where) for t in info.get(4, [])), nodes=nodes,
                     signatures=_signatures(found.get(5, []), where))


def read_saved_model(path: str | os.PathLike, max_bytes: int = MAX_GRAPH_BYTES, why: str = "") -> list[MetaGraph]:
    """The meta graphs of saved_model.pb; a file that is not a SavedModel, or larger than `max_bytes` (decoding takes
    about 15 times the file's size in memory; `why` says where the bound comes from), is one ModelFileError naming it."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileNotFound(f"{path}: not found (a TF-Hub module holds saved_model.pb beside variables/)")
    size = path.stat().st_size
    if size > min(max_bytes, MAX_GRAPH_BYTES):
        raise ModelFileError(f"{path}: {size:,} bytes, more than the {min(max_bytes, MAX_GRAPH_BYTES):,} a module's "
                             f"graph can have{' ' + why if why else ''}; refused before it is read")
    where = str(path)
    try:
        found = fields(path.read_bytes(), where)
        unknown = sorted(set(found) - {1, 2})
        if unknown or not found.get(2) or not isinstance(found.get(1, [1])[-1], int):
            raise ModelFileError(f"{where}: expected a schema version and meta graphs, found protobuf fields "
                                 f"{sorted(found)[:6]}")
        graphs = [_meta_graph(data, where) for data in found[2]]
    except ModelFileError as e:
        reason = str(e).removeprefix(where + ": ")
        raise ModelFileError(f"{where}: not a TensorFlow SavedModel ({reason})") from None
    if not any(g.nodes for g in graphs):
        raise ModelFileError(f"{where}: a SavedModel whose graphs have no nodes")
    return graphs
