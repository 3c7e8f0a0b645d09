"""`elmo embed-dataset`'s unit of work: a part, a fixed range of an input's rows, written as one Parquet file.

The plan is made from the input alone (its files in name order, `part_rows` rows a part), so every run of the
same input and settings makes the same parts with the same names. A part is written to a temporary name and
renamed when whole: a part file that exists is complete, a rerun skips it, and a part run twice (a retried Ray
task) replaces its file with the same rows, so every id is written exactly once.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator

import numpy as np

from elmo.errors import InputError
from elmo.files.text_lines import MAX_LINE_BYTES, decode_line, iter_raw_lines, open_binary, read_line

FORMATS = {"text": (".txt", ".txt.gz", ".txt.bz2", ".txt.xz"), "jsonl": (".jsonl", ".json", ".jsonl.gz"),
           "parquet": (".parquet",), "fasta": (".fasta", ".fa", ".faa", ".fasta.gz", ".fa.gz", ".faa.gz")}
FASTA_COLUMN = "residues"  # a FASTA row's tokens: its residues, one a token (SeqVec's input)
COMPRESSED = (".gz", ".bz2", ".xz")


@dataclasses.dataclass(frozen=True)
class Part:
    """Rows [first_id, first_id + rows) of the whole input, found in one file: from byte `offset` (plain
    text/JSONL), after `first_line` lines (compressed text/JSONL, read from the start; FASTA: records), or Parquet
    row groups."""

    index: int
    path: str
    kind: str
    first_id: int
    rows: int
    offset: int = 0
    first_line: int = 0
    row_groups: tuple[int, ...] = ()

    @property
    def file_name(self) -> str:
        return f"part-{self.index:06d}.parquet"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Part:
        d = json.loads(text)
        return cls(**{**d, "row_groups": tuple(d["row_groups"])})


def input_kind(path: str, kind: str | None) -> str:
    if kind is not None:
        if kind not in FORMATS:
            raise InputError(f"--format {kind!r}: expected one of {', '.join(FORMATS)}")
        return kind
    for name, suffixes in FORMATS.items():
        if path.lower().endswith(suffixes):
            return name
    known = ", ".join(s for suffixes in FORMATS.values() for s in suffixes)
    raise InputError(f"{path}: cannot tell its format from its name (expected {known}); "
                     "name it with --format text|jsonl|parquet|fasta")


def input_files(path: str, kind: str | None) -> list[tuple[str, str]]:
    """(file, format) for INPUT: one file, or a folder's files of the format, in name order."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith((".", "_")))
        files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
        if kind is None:
            kinds = {input_kind(f, None) for f in files}
            if len(kinds) != 1:
                raise InputError(f"{path}: expected files of one format, found {sorted(kinds) or 'none'}; "
                                 "name it with --format")
            kind = kinds.pop()
        files = [f for f in files if f.lower().endswith(FORMATS[kind])]
        if not files:
            raise InputError(f"{path}: no {kind} files ({', '.join(FORMATS[kind])}) in this folder")
        return [(f, kind) for f in files]
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file or folder")
    return [(path, input_kind(path, kind))]


def _line_parts(path: str, kind: str, part_rows: int, first_id: int, index: int, max_bytes: int) -> list[Part]:
    """Every `part_rows` lines one part; for a plain file each part knows its byte offset."""
    parts, offset, start_offset, start_line, count = [], 0, 0, 0, 0
    plain = not path.lower().endswith(COMPRESSED)
    for number, raw in iter_raw_lines(path, max_bytes, "--max-line-bytes"):
        if count == part_rows:
            parts.append(Part(index + len(parts), path, kind, first_id + start_line, count,
                              start_offset if plain else -1, start_line))
            start_offset, start_line, count = offset, number, 0
        offset += len(raw)
        count += 1
    if count:
        parts.append(Part(index + len(parts), path, kind, first_id + start_line, count, start_offset if plain else -1,
                          start_line))
    return parts


def _parquet_parts(path: str, part_rows: int, first_id: int, index: int) -> list[Part]:
    """Consecutive row groups of at least `part_rows` rows (a larger row group is a part of its own)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    parts, groups, rows, first = [], [], 0, first_id
    for g in range(meta.num_row_groups):
        groups.append(g)
        rows += meta.row_group(g).num_rows
        if rows >= part_rows:
            parts.append(Part(index + len(parts), path, "parquet", first, rows, row_groups=tuple(groups)))
            first, groups, rows = first + rows, [], 0
    if groups and rows:
        parts.append(Part(index + len(parts), path, "parquet", first, rows, row_groups=tuple(groups)))
    return parts


def fasta_records(path: str, uppercase: bool = False) -> list:
    """The proteins code's FASTA reader (Biopython; every record checked, one line naming a bad one)."""
    try:
        from elmo.proteins.fasta import read_fasta

        return read_fasta(path, uppercase)
    except ImportError as e:
        raise InputError(f"{path}: FASTA input needs Biopython: pip install 'elmo-bilm[proteins]' ({e})") from None


def _fasta_parts(path: str, part_rows: int, first_id: int, index: int, seen: dict[str, str],
                 uppercase: bool) -> list[Part]:
    """Every `part_rows` records one part; record ids unique across the input's files (they are the rows' ids)."""
    records = fasta_records(path, uppercase)
    for record in records:
        if record.id in seen:
            raise InputError(f"{path}: record {record.number} ({record.id!r}): the id is used by {seen[record.id]} "
                             "too; ids must be unique across the input")
        seen[record.id] = path
    return [Part(index + n, path, "fasta", first_id + start, min(part_rows, len(records) - start), first_line=start)
            for n, start in enumerate(range(0, len(records), part_rows))]


def plan_parts(files: list[tuple[str, str]], part_rows: int, max_bytes: int = MAX_LINE_BYTES,
               uppercase: bool = False) -> list[Part]:
    """The deterministic parts of the input (ids: each row's number in the input, files in order)."""
    if isinstance(part_rows, bool) or not isinstance(part_rows, int) or part_rows < 1:
        raise InputError(f"--part-rows {part_rows!r}: expected a positive whole number of rows")
    parts: list[Part] = []
    first_id, seen_ids = 0, {}
    for path, kind in files:
        if kind == "fasta":
            new = _fasta_parts(path, part_rows, first_id, len(parts), seen_ids, uppercase)
        elif kind == "parquet":
            new = _parquet_parts(path, part_rows, first_id, len(parts))
        else:
            new = _line_parts(path, kind, part_rows, first_id, len(parts), max_bytes)
        parts += new
        first_id += sum(p.rows for p in new)
    return parts


def _part_lines(part: Part, max_bytes: int) -> Iterator[tuple[int, str]]:
    """(line number in its file, text) of the part's lines."""
    if part.offset < 0:  # compressed: read from the start
        every = iter_raw_lines(part.path, max_bytes, "--max-line-bytes")
        lines = ((n, raw) for n, raw in every if n >= part.first_line)
        for (number, raw), _ in zip(lines, range(part.rows)):
            yield number, decode_line(raw, part.path, number).rstrip("\r\n")
        return
    with open_binary(part.path) as f:
        f.seek(part.offset)
        for number in range(part.first_line, part.first_line + part.rows):
            raw = read_line(f, part.path, number, max_bytes, "--max-line-bytes")
            yield number, decode_line(raw, part.path, number).rstrip("\r\n")


def _json_row(text: str, path: str, number: int) -> dict:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}, line {number + 1}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(row, dict):
        raise InputError(f"{path}, line {number + 1}: expected a JSON object per line, found {type(row).__name__}")
    return row


def read_part(part: Part, column: str, id_column: str | None, max_bytes: int = MAX_LINE_BYTES,
              uppercase: bool = False) -> dict[str, list]:
    """The part's rows as {"id": [...], column: [...]}: ids from `id_column` where named, else row numbers
    (FASTA: the record ids, and each record's residues as its tokens)."""
    if part.kind == "fasta":
        records = fasta_records(part.path, uppercase)[part.first_line : part.first_line + part.rows]
        return {"id": [r.id for r in records], column: [list(r.sequence) for r in records]}
    if part.kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(part.path).read_row_groups(list(part.row_groups))
        missing = [c for c in (column, id_column) if c is not None and c not in table.column_names]
        if missing:
            raise InputError(f"{part.path}: no column {missing[0]!r} (its columns: {', '.join(table.column_names)})")
        values = table.column(column).to_pylist()
        ids = (table.column(id_column).to_pylist() if id_column
               else list(range(part.first_id, part.first_id + part.rows)))
        return {"id": ids, column: values}
    numbered = list(_part_lines(part, max_bytes))
    if part.kind == "text":
        return {"id": [part.first_id + i for i in range(len(numbered))], column: [text for _, text in numbered]}
    rows = [(n, _json_row(text, part.path, n)) for n, text in numbered]
    for n, row in rows:
        for name in (column, id_column):
            if name is not None and name not in row:
                raise InputError(f"{part.path}, line {n + 1}: no key {name!r} (its keys: {', '.join(row) or 'none'})")
    ids = [row[id_column] for _, row in rows] if id_column else [part.first_id + i for i in range(len(rows))]
    return {"id": ids, column: [row[column] for _, row in rows]}


def vector_array(arrays: list[np.ndarray], pooled: bool):
    """Ray's tensor extension arrays (what `map_batches` makes of the same vectors): fixed-shape when pooled,
    variable-shaped per token."""
    from ray.data.extensions import ArrowTensorArray, ArrowVariableShapedTensorArray

    if pooled:
        return ArrowTensorArray.from_numpy(np.stack(arrays))
    return ArrowVariableShapedTensorArray.from_numpy(arrays)
