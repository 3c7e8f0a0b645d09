"""A bilm-tf checkpoint as a model reference: `--model model.ckpt-N` or `--model RUN_DIR` works like a model directory.

The checkpoint is imported once (elmo.tf.bilm_import) into `$ELMO_CACHE/local/tf-<key>/model`, keyed by the
checkpoint's, options' and vocabulary's resolved paths, with their sizes and modification times recorded beside it: a
changed file is imported again into the same folder, replacing the old copy; the original files are never touched. A bilm-tf run directory is options.json + the `checkpoint` file naming
the newest checkpoint (+ its files), without weights.hdf5; the vocabulary is a vocab.txt (or one vocab*.txt) beside.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from elmo.errors import ModelFileError
from elmo.files.layout import OPTIONS_NAME, WEIGHTS_NAME

from .checkpoint import checkpoint_prefix, is_checkpoint_prefix

CHECKPOINT_INDEX = "checkpoint"  # the text file where TensorFlow's Saver names the newest checkpoint
CACHE_PREFIX = "tf-"


def is_bilm_tf_run(path: str | os.PathLike) -> bool:
    """A folder with TensorFlow's `checkpoint` file and no weights.hdf5; without options.json too, so that the
    import names what is missing, as `elmo import-tf` does, rather than the resolver calling it no model."""
    d = Path(path)
    return d.is_dir() and (d / CHECKPOINT_INDEX).is_file() and not (d / WEIGHTS_NAME).is_file()


def is_bilm_tf_reference(text: str | os.PathLike) -> bool:
    """A bilm-tf run directory, or a checkpoint prefix (or one of its files: the .index is what marks one)."""
    path = Path(text)
    return is_bilm_tf_run(path) or is_checkpoint_prefix(path)


def vocab_beside(directory: Path) -> Path | None:
    """vocab.txt, else the one vocab*.txt (bilm-tf's README names it vocab-2016-09-10.txt) of the directory."""
    if (directory / "vocab.txt").is_file():
        return directory / "vocab.txt"
    found = sorted(directory.glob("vocab*.txt"))
    return found[0] if len(found) == 1 else None


def _stamp(path: Path | None) -> str:
    if path is None:
        return "-"
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def imported_model_dir(text: str | os.PathLike) -> Path:
    """The model directory of a bilm-tf checkpoint or run directory, imported into the cache on first use, and
    again, in the same place, when its files change (one copy per checkpoint, however often it is touched)."""
    from filelock import FileLock

    from elmo.files.layout import cache_root

    from .bilm_import import find_bilm_checkpoint, import_bilm_checkpoint
    from .checkpoint import TFCheckpoint

    path = Path(text)
    directory = path if path.is_dir() else checkpoint_prefix(path).parent
    source = find_bilm_checkpoint(path, vocab=vocab_beside(directory))
    ckpt = TFCheckpoint(source.prefix)
    files = [ckpt.index_path, *(ckpt.shard_path(i) for i in range(ckpt.header.num_shards)), source.options_file,
             source.vocab_file]
    place = "\n".join("-" if f is None else str(f.resolve()) for f in files)
    stamp = "\n".join(_stamp(f) for f in files)
    folder = cache_root() / "local" / (CACHE_PREFIX + hashlib.sha256(place.encode("utf-8")).hexdigest()[:32])
    model, record = folder / "model", folder / "source.txt"

    def current() -> bool:
        try:
            return (model / WEIGHTS_NAME).is_file() and record.read_text(encoding="utf-8") == stamp
        except OSError:
            return False

    if not current():
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(folder / ".lock"):
            if not current():
                record.unlink(missing_ok=True)
                import_bilm_checkpoint(source, model, overwrite=True)  # replaces the model's files in one rename
                record.write_text(stamp, encoding="utf-8")
    return model


CHECKPOINT_ROLES = ("options", "index", "data", "vocab")


def _link(target: Path, link: Path) -> None:
    """`link` names `target`: a hard link where the file system allows, else a symbolic one (never a copy)."""
    try:
        os.link(target, link)
    except OSError:
        os.symlink(target.resolve(), link)


def checkpoint_from_files(files: dict[str, Path], prefix_name: str) -> Path:
    """Checkpoint files that lie apart (a catalog entry's, each in its own cache entry) as a model directory: linked
    side by side into a bilm-tf run directory, then imported once."""
    from filelock import FileLock

    from elmo.files.layout import cache_root

    missing = [role for role in CHECKPOINT_ROLES[:3] if role not in files]
    if missing:
        raise ModelFileError(f"a TensorFlow checkpoint entry needs the files {CHECKPOINT_ROLES[:3]}; missing {missing}")
    key = prefix_name + "\n" + "\n".join(f"{role}={_stamp(files.get(role))}" for role in CHECKPOINT_ROLES)
    folder = cache_root() / "local" / (CACHE_PREFIX + "files-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32])
    run = folder / "run"
    if not (run / CHECKPOINT_INDEX).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(folder / ".lock"):
            if not (run / CHECKPOINT_INDEX).is_file():
                import shutil

                shutil.rmtree(run, ignore_errors=True)
                run.mkdir()
                names = {"options": OPTIONS_NAME, "index": f"{prefix_name}.index",
                         "data": f"{prefix_name}.data-00000-of-00001", "vocab": "vocab.txt"}
                for role, path in files.items():
                    _link(Path(path), run / names[role])
                (run / CHECKPOINT_INDEX).write_text(f'model_checkpoint_path: "{prefix_name}"\n', encoding="utf-8")
    return imported_model_dir(run)


def fetch_published_checkpoint(files: dict, timeout: float | None = None) -> Path:
    """A catalog entry of format "tf-checkpoint" (role -> RemoteFile: options, index, data, vocab): each file
    fetched (or found in the cache), then imported as a model directory."""
    from urllib.parse import urlsplit

    from elmo.hub.fetch import fetch

    local = {role: fetch(remote.url, timeout, remote) for role, remote in files.items()}
    prefix_name = Path(urlsplit(files["index"].url).path).name.removesuffix(".index")
    return checkpoint_from_files(local, prefix_name)
