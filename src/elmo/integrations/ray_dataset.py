"""`elmo embed-dataset`: a dataset's rows embedded by Ray Data actors into a folder of Parquet parts, resumable.

Ray Data runs the parts (`ray_parts.Part`) through a pool of `EmbedParts` actors (`map_batches`, one part per
call); each actor holds one `ElmoBatchEmbedder` and writes each part to a temporary file renamed when whole.
A rerun skips the parts whose files exist. Ray retries the parts of an actor or node that died
(`max_restarts=-1`, Ray Data's default for actor pools), and a retried part replaces its own file, so each id
appears exactly once (docs/at-scale.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterator

import numpy as np

from elmo.errors import ElmoError, InputError, OutputError
from elmo.files.fileio import atomic_path, json_text, output_lock
from elmo.files.text_lines import MAX_LINE_BYTES
from elmo.model.threads import usable_cpus

from .ray import OUTPUT_COLUMN, ElmoBatchEmbedder
from .ray_parts import FASTA_COLUMN, Part, input_files, plan_parts, read_part, vector_array

MANIFEST = "_elmo_dataset.json"
MANIFEST_FORMAT = 1
WINDOW_BATCHES = 16  # the Embedder's window (batch_size x 16 lines sorted by length together), as in elmo embed


@dataclasses.dataclass(frozen=True)
class DatasetSettings:
    """What decides the output's bytes (kept in the manifest: a rerun with others is refused)."""

    model: str | None = None
    text_column: str = "text"
    tokens_column: str | None = None
    id_column: str | None = None
    output_format: str = "all"
    layers: tuple[int, ...] | None = None
    pool: str | None = None
    dtype: str = "float32"
    int8: bool = False
    part_rows: int = 10_000
    input_format: str | None = None
    max_line_bytes: int = MAX_LINE_BYTES
    uppercase: bool = False  # FASTA: lower-case residues upper-cased (else refused, as the proteins code does)

    def embedder_kwargs(self) -> dict:
        return {"text_column": self.text_column, "tokens_column": self.tokens_column,
                "output_format": self.output_format, "layers": self.layers, "pool": self.pool, "dtype": self.dtype,
                "int8": self.int8}


class EmbedParts:
    """A Ray Data actor: embeds whole parts and writes each to OUTPUT/part-NNNNNN.parquet (temporary, renamed)."""

    def __init__(self, output: str, settings: DatasetSettings, batch_size: int = 64, threads: int | None = None):
        self.output, self.settings = output, settings
        self.embedder = ElmoBatchEmbedder(settings.model, **settings.embedder_kwargs(), batch_size=batch_size,
                                          threads=threads)

    def write_part(self, part: Part) -> tuple[int, int]:
        """The part's file, written whole or not at all; returns (rows, tokens)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        column = self.embedder.column
        rows = read_part(part, column, self.settings.id_column, self.settings.max_line_bytes, self.settings.uppercase)
        tokens, writer, chunk_rows = 0, None, self.embedder.batch_size * WINDOW_BATCHES
        # As elmo embed embeds a part: from an empty token cache, in windows from the part's first row, so the
        # batches, and so the vectors, are elmo embed's own for the same part size (--part-lines = --part-rows).
        self.embedder.embedder.bilm.token_cache.clear()
        with atomic_path(os.path.join(self.output, part.file_name), suffix=".parquet.tmp") as tmp:
            try:  # one Parquet row group per window: an actor holds one window's vectors at a time
                for start in range(0, len(rows["id"]), chunk_rows):
                    chunk = {name: values[start : start + chunk_rows] for name, values in rows.items()}
                    sentences = self.embedder.sentences(chunk)
                    tokens += sum(map(len, sentences))
                    vectors = vector_array(self.embedder.embed(sentences), self.embedder.spec.pool is not None)
                    table = pa.table({"id": chunk["id"], column: chunk[column], self.embedder.output_column: vectors})
                    writer = writer or pq.ParquetWriter(tmp, table.schema)
                    writer.write_table(table)
            finally:
                if writer is not None:
                    writer.close()
        return len(rows["id"]), tokens

    def __call__(self, batch: dict) -> dict:
        """Counts per part, and the error line of a part that bad input stopped (Ray's wrappers would bury the
        package's one-line message in a traceback; the driver raises it as it is)."""
        done, errors = [], []
        for part in map(Part.from_json, batch["part"]):
            try:
                done.append((part.index, *self.write_part(part)))
                errors.append("")
            except ElmoError as e:
                done.append((part.index, 0, 0))
                errors.append(f"{type(e).__name__}: {e}")
        names = ("index", "rows", "tokens")
        columns = {name: np.array(values, dtype=np.int64) for name, values in zip(names, zip(*done))}
        return {**columns, "error": np.array(errors, dtype=object)}


def check_manifest(output: str, manifest: dict, overwrite: bool) -> None:
    """OUTPUT is new, or holds parts made by these settings from this input (else refused, or cleared with
    --overwrite); leftovers of a killed run (temporary files) are removed."""
    path = os.path.join(output, MANIFEST)
    if os.path.isdir(output) and (os.listdir(output) and not os.path.exists(path)) and not overwrite:
        raise InputError(f"{output}: a folder that is not an earlier embed-dataset output (no {MANIFEST}); "
                         "name a new OUTPUT")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
        if {k: v for k, v in found.items() if k != "complete"} != manifest and not overwrite:
            raise InputError(f"{output}: its parts were made from another input or with other settings ({MANIFEST}); "
                             "--overwrite replaces them, or name another OUTPUT")
        if overwrite:
            for name in os.listdir(output):
                if name.startswith("part-") or name == MANIFEST:
                    os.remove(os.path.join(output, name))
    os.makedirs(output, exist_ok=True)
    remove_temporaries(output)
    write_manifest(output, manifest, complete=False)


def remove_temporaries(output: str) -> None:
    """The temporary files of parts a killed actor or run was writing (never renamed, so never counted)."""
    for name in os.listdir(output):
        if name.startswith(".") and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(output, name))


def write_manifest(output: str, manifest: dict, complete: bool) -> None:
    with atomic_path(os.path.join(output, MANIFEST)) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json_text({**manifest, "complete": complete}, indent=1))


def model_identity(model: str | None) -> str:
    """The model's files' fingerprint where it is a local original model, else its reference."""
    from elmo.formats.fingerprints import files_fingerprint
    from elmo.models import resolve

    try:
        files = resolve(model).original_files()
        return files_fingerprint(files.options_file, files.weight_file)
    except (ElmoError, AttributeError, OSError):
        return str(model)


def local_only() -> None:
    """Before Ray is imported: no usage reports, and a local cluster's node address 127.0.0.1 (Ray otherwise
    replaces a loopback address by the machine's outward one; this switch is the one its macOS/Windows builds use)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@contextlib.contextmanager
def ray_cluster(address: str | None, cpus: int | None = None) -> Iterator[None]:
    """Connect to the cluster at `address`, or use the one this process already joined, or start a local one
    on 127.0.0.1 (no dashboard) and shut it down at the end, leaving no Ray process behind."""
    if not address:
        local_only()
    import ray

    if ray.is_initialized():
        yield
        return
    if address:
        ray.init(address=address, logging_level="warning")
    else:
        ray.init(address="local", num_cpus=cpus or usable_cpus(), include_dashboard=False, _node_ip_address="127.0.0.1",
                 logging_level="warning")
    try:
        yield
    finally:
        ray.shutdown()


def embed_dataset(input_path: str, output: str, settings: DatasetSettings, *, actors: int | None = None,
                  threads_per_actor: int = 1, batch_size: int = 64, address: str | None = None, overwrite: bool = False,
                  progress: bool = True) -> dict:
    """Embed INPUT's rows into OUTPUT's parts; returns counts and times (parts skipped, rows, tokens, seconds)."""
    started = time.perf_counter()
    files = input_files(input_path, settings.input_format)
    settings = fasta_settings(settings, files[0][1])
    parts = plan_parts(files, settings.part_rows, settings.max_line_bytes, settings.uppercase)
    recorded = {k: v for k, v in dataclasses.asdict(settings).items() if k != "uppercase" or v}  # earlier manifests
    manifest = {"format": MANIFEST_FORMAT, "settings": json.loads(json_text(recorded)),
                "model": model_identity(settings.model), "parts": len(parts), "rows": sum(p.rows for p in parts),
                "inputs": [[path, os.path.getsize(path), os.path.getmtime(path)] for path, _ in files]}
    with output_lock(output):
        return _embed_parts(output, parts, manifest, settings, overwrite, started,
                            dict(actors=actors, threads_per_actor=threads_per_actor, batch_size=batch_size,
                                 address=address, progress=progress))


def fasta_settings(settings: DatasetSettings, kind: str) -> DatasetSettings:
    """FASTA rows are tokens (the residues, in `tokens_column`, default "residues") with the record ids as ids."""
    if kind != "fasta":
        if settings.uppercase:
            raise InputError("--uppercase is for FASTA input (protein residues)")
        return settings
    if settings.id_column:
        raise InputError(f"--id-column {settings.id_column!r}: a FASTA row's id is its record's id; "
                         "--id-column is for JSONL or Parquet input")
    return dataclasses.replace(settings, tokens_column=settings.tokens_column or FASTA_COLUMN)


def _embed_parts(output: str, parts: list[Part], manifest: dict, settings: DatasetSettings, overwrite: bool,
                 started: float, run: dict) -> dict:
    from tqdm import tqdm

    check_manifest(output, manifest, overwrite)
    todo = [p for p in parts if not os.path.exists(os.path.join(output, p.file_name))]
    summary = {"parts": len(parts), "parts_skipped": len(parts) - len(todo), "rows": 0, "tokens": 0}
    if todo:
        with ray_cluster(run["address"]), tqdm(total=sum(p.rows for p in todo), unit="rows", smoothing=0.1,
                                                disable=not run["progress"], desc="embed-dataset") as bar:
            _run_parts(todo, output, settings, run["actors"], run["threads_per_actor"], run["batch_size"], bar, summary)
    remove_temporaries(output)
    missing = [p.file_name for p in parts if not os.path.exists(os.path.join(output, p.file_name))]
    if missing:
        raise ElmoError(f"{output}: {len(missing)} parts were not written ({missing[0]}, ...); rerun to finish them")
    write_manifest(output, manifest, complete=True)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    return summary


def _run_parts(todo: list[Part], output: str, settings: DatasetSettings, actors: int | None, threads_per_actor: int,
               batch_size: int, bar, summary: dict) -> None:
    import ray

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # ours counts rows; Ray's would draw one per operator
    if actors is None:
        actors = max(1, int(ray.cluster_resources().get("CPU", 1)) // threads_per_actor)
    actors = min(actors, len(todo))
    ds = ray.data.from_items([{"part": p.to_json()} for p in todo], override_num_blocks=len(todo))
    ds = ds.map_batches(EmbedParts, fn_constructor_kwargs={"output": os.path.abspath(output), "settings": settings,
                                                           "batch_size": batch_size, "threads": threads_per_actor},
                        batch_size=1, compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=threads_per_actor)
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        failed = [e for e in batch["error"] if e]
        if failed:
            kind, _, message = failed[0].partition(": ")
            raise (OutputError if kind == "OutputError" else InputError)(message)
        rows, tokens = int(batch["rows"].sum()), int(batch["tokens"].sum())
        summary["rows"] += rows
        summary["tokens"] += tokens
        bar.update(rows)


__all__ = ["DatasetSettings", "EmbedParts", "OUTPUT_COLUMN", "embed_dataset"]
