"""FASTA -> bio_embeddings' embed-stage files: `embeddings_file.h5` (per residue, (3, L, 1024) per protein),
`reduced_embeddings_file.h5` (per protein, (1024,): `reduce_per_protein`) and `mapping_file.csv`.

The layout is bio_embeddings' pipeline's (embed/pipeline.py, utilities/helpers.py): proteins sorted longest first,
each dataset keyed by the md5 of its sequence (or "0", "1", ... in that order with `simple_remapping`) with the
FASTA id in its `original_id` attribute, batches of `max_amino_acids` residues. The order and the batches matter:
with the carried state (the default, as bio_embeddings ran) each batch row continues the row before it.

Resumable and atomic: the two HDF5 files grow as `NAME.part` beside their final names, one batch at a time, and
`.progress.pt` records (atomically) the batches written, the settings and input they belong to, and the carried
state after the last of them; a run that stops continues where it was, with the same state, and the final names
appear only when every protein is written.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np
import torch
from tqdm import tqdm

from elmo.errors import InputError, OutputError
from elmo.files.fileio import atomic_path, hash_file, output_lock
from elmo.files.torch_files import load_torch_file

from .fasta import Protein, read_fasta
from .seqvec import SeqVecEmbedder, residue_batches

EMBEDDINGS_FILE = "embeddings_file.h5"
REDUCED_FILE = "reduced_embeddings_file.h5"
MAPPING_FILE = "mapping_file.csv"
PROGRESS_FILE = ".progress.pt"


@dataclass(frozen=True)
class RunSettings:
    """What the files depend on; a resumed run must match it."""

    fasta_sha256: str
    model: str
    stateful: bool
    warmup_rounds: int
    max_amino_acids: int
    simple_remapping: bool
    per_residue: bool
    uppercase: bool


def protein_keys(proteins: list[Protein], simple_remapping: bool = False) -> list[str]:
    """bio_embeddings' dataset keys, in its (longest first) order; identical sequences are refused, as there."""
    if simple_remapping:
        return [str(i) for i in range(len(proteins))]
    first: dict[str, Protein] = {}
    for p in proteins:
        if p.md5 in first:
            raise InputError(f"record {p.number} ({p.id!r}) has the same sequence as record {first[p.md5].number} "
                             f"({first[p.md5].id!r}): datasets are keyed by the sequence's md5 (as bio_embeddings "
                             "does); remove the copy, or key them by position with --simple-remapping")
        first[p.md5] = p
    return [p.md5 for p in proteins]


def embed_fasta(embedder: SeqVecEmbedder, fasta: str | os.PathLike, out_dir: str | os.PathLike, *,
                max_amino_acids: int | None = None, simple_remapping: bool = False, per_residue: bool = True,
                uppercase: bool = False, model_name: str = "seqvec", progress: bool = True,
                overwrite: bool = False) -> dict[str, int]:
    """Embed every protein of `fasta` into `out_dir` (made if absent); -> counts of proteins and residues.
    Finished files already there are refused unless `overwrite` (replaced only when the new ones are complete)."""
    proteins = sorted(read_fasta(fasta, uppercase), key=lambda p: -len(p.sequence))  # stable: file order in ties
    try:
        keys = protein_keys(proteins, simple_remapping)
    except InputError as e:
        raise InputError(f"{os.fspath(fasta)}: {e}") from None
    settings = RunSettings(hash_file(fasta).hexdigest(), model_name, embedder.stateful, embedder.warmup_rounds,
                           max_amino_acids or embedder.max_amino_acids, simple_remapping, per_residue, uppercase)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [EMBEDDINGS_FILE, REDUCED_FILE] if per_residue else [REDUCED_FILE]
    with output_lock(out / REDUCED_FILE, flag="output folder"):
        done = _resume(embedder, out, settings)
        finished = [name for name in names + [MAPPING_FILE] if (out / name).exists()]
        if finished and not done and not overwrite:
            raise OutputError(f"{out}: already holds {', '.join(finished)}; --overwrite (overwrite=True) replaces them")
        batches = list(residue_batches(list(zip(keys, proteins)), settings.max_amino_acids,
                                       lambda kp: len(kp[1].sequence)))
        total = sum(len(p.sequence) for p in proteins)
        already = sum(len(p.sequence) for batch in batches[:done] for _, p in batch)
        with _parts(out, names, fresh=done == 0) as files, tqdm(
                total=total, initial=already, unit="res", unit_scale=True, desc="embedding proteins",
                disable=not progress) as bar:
            for number in range(done, len(batches)):
                batch = batches[number]
                vectors = embedder.embed_batch([p.sequence for _, p in batch])
                for (key, protein), embedding in zip(batch, vectors):
                    _write(files, key, protein.id, embedding, embedder.reduce_per_protein(embedding))
                for f in files.values():
                    f.flush()
                _save_progress(embedder, out, settings, number + 1)
                bar.update(sum(len(p.sequence) for _, p in batch))
        _finish(out, names, proteins, keys)
    return {"proteins": len(proteins), "residues": total}


def _write(files: dict[str, h5py.File], key: str, original_id: str, embedding: np.ndarray,
           reduced: np.ndarray) -> None:
    for name, data in ((EMBEDDINGS_FILE, embedding), (REDUCED_FILE, reduced)):
        if name in files:
            f = files[name]
            if key in f:  # written after the last recorded batch by a run that stopped: written again
                del f[key]
            f.create_dataset(key, data=data).attrs["original_id"] = original_id


@contextlib.contextmanager
def _parts(out: Path, names: list[str], fresh: bool):
    files = {}
    try:
        for name in names:
            part = out / (name + ".part")
            if fresh and part.exists():
                part.unlink()
            try:
                files[name] = h5py.File(part, "a")
            except OSError as e:
                raise OutputError(f"{part}: a part file of an earlier run that cannot be read ({e}); remove it and "
                                  f"{out / PROGRESS_FILE} to start again") from None
        yield files
    finally:
        for f in files.values():
            f.close()


def _settings_text(settings: RunSettings) -> str:
    return repr(sorted(asdict(settings).items()))


def _resume(embedder: SeqVecEmbedder, out: Path, settings: RunSettings) -> int:
    """Batches already written by an earlier run with the same settings (its carried state restored); else 0."""
    path = out / PROGRESS_FILE
    if not path.exists():
        return 0
    saved = load_torch_file(path, "a progress file")
    if saved.get("settings") != _settings_text(settings):
        raise OutputError(f"{out}: holds an unfinished run with other settings or another FASTA file "
                          f"({path}); remove that file and the .part files to start again, or run it as it was")
    if settings.stateful:
        embedder.embedder.bilm._states.by_direction = saved["states"]  # the state after the last written batch
    return int(saved["batches"])


def _save_progress(embedder: SeqVecEmbedder, out: Path, settings: RunSettings, batches: int) -> None:
    states = embedder.embedder.bilm._states.by_direction if settings.stateful else None
    with atomic_path(out / PROGRESS_FILE) as tmp:
        torch.save({"settings": _settings_text(settings), "batches": batches, "states": states}, tmp)


def _finish(out: Path, names: list[str], proteins: list[Protein], keys: list[str]) -> None:
    """The final names, each in one rename; the mapping file as bio_embeddings writes it (pandas' to_csv)."""
    with atomic_path(out / MAPPING_FILE) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(",original_id,sequence_length\n")
            for key, p in zip(keys, proteins):
                f.write(f"{key},{_csv_cell(p.id)},{len(p.sequence)}\n")
    for name in names:
        os.replace(out / (name + ".part"), out / name)
    (out / PROGRESS_FILE).unlink()


def _csv_cell(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text

