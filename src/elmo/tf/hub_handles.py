"""TF-Hub handles (`https://tfhub.dev/google/elmo/3`, Kaggle Models' forms) and module archives as local module folders.

A handle is looked up, in order and without the network, in TF-Hub's own cache (`$TFHUB_CACHE_DIR`, else
`<system temp dir>/tfhub_modules`: one folder per handle, named by the sha1 of the handle string as the user wrote
it, tensorflow_hub's compressed resolver), then in ours; else the module is downloaded as TF-Hub's compressed format
(`<handle>?tf-hub-format=compressed`, a .tar.gz; tfhub.dev now redirects it to Kaggle Models) through the same
locked, verified, resumable cache as every published file (elmo.hub.fetch), and unpacked beside it, checked like
any archive (elmo.hub.archives) and bounded by what its own `variables/variables.index` says the variables take
(module_budget). A local module .tar.gz is unpacked into a temporary folder, imported (elmo.tf.hub_import: one copy
per module content) and the unpacked files removed. An import that fails leaves nothing in the cache. The default
TF-Hub location lies in the shared temp directory: there a folder not owned by the user, or writable by others, is
ignored with a warning. Reading a module is elmo.tf.hub_import's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from elmo.errors import ModelFileError, OfflineError
from elmo.files.layout import cache_root
from elmo.hub.archives import MAX_MEMBERS, UNREADABLE, extract_archive, is_archive_name
from elmo.hub.cache import OFFLINE_ENV, CacheEntry, offline

TFHUB_CACHE_ENV = "TFHUB_CACHE_DIR"
TFHUB_ROOT = "https://tfhub.dev"  # where handles are downloaded from (compressed format)
COMPRESSED = "tf-hub-format=compressed"
MODULE_FILES = ("saved_model.pb", "tfhub_module.pb")
_TFHUB = re.compile(r"https?://(?:www\.)?tfhub\.dev/(?P<publisher>[\w.-]+)/(?P<model>[\w.-]+(?:/[\w.-]+)*?)/"
                    r"(?P<version>\d+)/?(?:\?" + re.escape(COMPRESSED) + r")?", re.IGNORECASE)
_KAGGLE = re.compile(r"https?://(?:www\.)?kaggle\.com/models/(?P<publisher>[\w.-]+)/(?P<model>[\w.-]+)/"
                     r"(?:frameworks/)?(?P<framework>tensorflow[12])/(?:variations/)?(?P<variation>[\w.-]+)/"
                     r"(?:versions/)?(?P<version>\d+)/?", re.IGNORECASE)
_COMPRESSED_URL = re.compile(r"https?://[^?#]+\?" + re.escape(COMPRESSED), re.IGNORECASE)
INDEX_MEMBER, GRAPH_MEMBER = ("variables", "variables.index"), "saved_model.pb"
MAX_INDEX_BYTES = 64 << 20  # one entry per tensor: far above any module's index
OTHER_MODULE_BYTES = 16 << 20  # tfhub_module.pb and assets beside the graph and the variables


@dataclass(frozen=True)
class Handle:
    """A module handle: the text as given, and the URL of its compressed download."""

    text: str
    download_url: str
    version: int | None

    def spellings(self) -> tuple[str, ...]:
        """Every handle string TF-Hub's cache may know this module by (the cache folder is the sha1 of the string)."""
        found = [self.text]
        m = _TFHUB.fullmatch(self.text) or _KAGGLE.fullmatch(self.text)
        if m is not None:
            p, model, v = m.group("publisher"), m.group("model"), m.group("version")
            variation = m.groupdict().get("variation") or model.rsplit("/", 1)[-1]
            found += [f"https://tfhub.dev/{p}/{model}/{v}", f"http://tfhub.dev/{p}/{model}/{v}",
                      f"https://tfhub.dev/{p}/{model}/{v}/"]
            for framework in ("tensorFlow1", "TensorFlow1", "tensorflow1"):
                found += [f"https://www.kaggle.com/models/{p}/{model}/{framework}/{variation}/{v}",
                          f"https://www.kaggle.com/models/{p}/{model}/frameworks/{framework}/variations/{variation}/versions/{v}"]
        return tuple(dict.fromkeys(found))


def parse_handle(text: str) -> Handle | None:
    """A TF-Hub handle (tfhub.dev, Kaggle Models, or any URL asking for `?tf-hub-format=compressed`), else None."""
    m = _TFHUB.fullmatch(text)
    if m is not None:
        url = f"{TFHUB_ROOT}/{m.group('publisher')}/{m.group('model')}/{m.group('version')}?{COMPRESSED}"
        return Handle(text, url, int(m.group("version")))
    m = _KAGGLE.fullmatch(text)
    if m is not None:  # tfhub.dev's handles and Kaggle's are one module; tfhub.dev's compressed URL redirects there
        url = f"{TFHUB_ROOT}/{m.group('publisher')}/{m.group('model')}/{m.group('version')}?{COMPRESSED}"
        return Handle(text, url, int(m.group("version")))
    if _COMPRESSED_URL.fullmatch(text):
        return Handle(text, text, None)
    return None


def tfhub_cache_dir() -> Path:
    """TF-Hub's cache: $TFHUB_CACHE_DIR, else <system temp dir>/tfhub_modules (tensorflow_hub's resolver)."""
    return Path(os.environ.get(TFHUB_CACHE_ENV) or Path(tempfile.gettempdir()) / "tfhub_modules").expanduser()


def module_dir_in(folder: Path, source: str) -> Path:
    """The module folder (saved_model.pb) at the top of `folder` or one level down."""
    if (folder / MODULE_FILES[0]).is_file():
        return folder
    found = sorted(p for p in folder.iterdir() if p.is_dir() and (p / MODULE_FILES[0]).is_file()) if folder.is_dir() else []
    if len(found) != 1:
        raise ModelFileError(f"{source}: holds {'no' if not found else len(found)} TF-Hub module folders (expected one "
                             f"with {MODULE_FILES[0]} and variables/); unpacked in {folder}")
    return found[0]


def untrusted_reason(folder: Path) -> str | None:
    """Why a folder of the shared temp directory's TF-Hub cache must not be loaded (another user owns it or a file in
    it, or others may write them), or None. Not checked where the system has no user ids."""
    if not hasattr(os, "getuid"):
        return None
    uid, gid = os.getuid(), os.getgid()
    variables = folder / "variables"
    read = [folder / name for name in MODULE_FILES] + ([variables, *variables.iterdir()] if variables.is_dir() else [])
    for path in (folder.parent, folder, *(p for p in read if os.path.lexists(p))):
        info = path.lstat()
        if info.st_uid not in (uid, 0):
            return f"{path} is owned by user id {info.st_uid}, not by you ({uid})"
        if info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and info.st_gid != gid):
            return f"{path} is writable by others (mode {stat.filemode(info.st_mode)})"
    return None


def find_in_tfhub_cache(handle: Handle) -> Path | None:
    """The module TF-Hub already downloaded for this handle (any spelling), or None. In the default location (no
    $TFHUB_CACHE_DIR: the shared temp directory, where any user can make folders) a folder another user owns or
    may write is ignored with a warning."""
    root = tfhub_cache_dir()
    shared = not os.environ.get(TFHUB_CACHE_ENV)
    for spelling in handle.spellings():
        folder = root / hashlib.sha1(spelling.encode("utf-8")).hexdigest()
        if (folder / MODULE_FILES[0]).is_file():
            reason = untrusted_reason(folder) if shared else None
            if reason is None:
                return folder
            warnings.warn(f"{folder}: ignored for {handle.text}: {reason}; TF-Hub's default cache is in the shared "
                          f"temp directory, where anyone can plant a module (set {TFHUB_CACHE_ENV} to a folder of "
                          f"yours to use one)", stacklevel=2)
    return None


def fetch_tfhub_module(handle: Handle, timeout: float | None = None) -> Path:
    """The local module folder of a handle: TF-Hub's cache, ours, or downloaded (module docstring). A download whose
    module does not import is removed from the cache."""
    found = find_in_tfhub_cache(handle)
    if found is not None:
        return found
    entry = CacheEntry.for_url(handle.download_url)
    if entry.extracted.is_dir() and not entry.extracted.is_symlink():
        return module_dir_in(entry.extracted, handle.text)
    if offline() and not entry.path.is_file():
        raise OfflineError(handle.text, f"not in TF-Hub's cache ({tfhub_cache_dir()}, as the sha1 of the handle) nor in "
                           f"ours ({entry.folder}), and {OFFLINE_ENV}=1 forbids downloading it; on a machine with "
                           f"network run `elmo download {handle.text}` and copy {cache_root()}, or point "
                           f"{TFHUB_CACHE_ENV} at a TF-Hub cache that holds it")
    from elmo.hub.download import entry_lock, forget, unpack_entry
    from elmo.hub.fetch import fetch

    from .hub_import import imported_module_dir

    archive = fetch(handle.download_url, timeout)
    with entry_lock(entry):
        if not entry.extracted.is_dir():
            unpack_entry(entry, archive, budget=module_budget)  # a damaged archive leaves the cache
        try:
            folder = module_dir_in(entry.extracted, handle.text)
            imported_module_dir(folder, source=handle.text)
        except ModelFileError as e:
            forget(entry)
            raise ModelFileError(f"{handle.text}: the downloaded module does not import, so it was removed from the "
                                 f"cache: {e}") from None
    return folder


def module_budget(archive: Path, members: list) -> int:
    """The bytes a module archive may unpack, from its own variables/variables.index (read before anything is
    written): the tensors' bytes it lists, the index, a graph of that many variables (elmo.tf.hub_import's
    graph_budget; a larger saved_model.pb is refused here) and OTHER_MODULE_BYTES."""
    from .checkpoint import TFCheckpoint
    from .hub_import import graph_budget

    def parts(member) -> tuple[str, ...]:
        return tuple(p for p in PurePosixPath(member.name.replace("\\", "/")).parts if p not in ("", ".", "/"))

    index = [m for m in members if not m.is_dir and parts(m)[-2:] == INDEX_MEMBER and len(parts(m)) <= 3]
    if len(index) != 1:
        raise ModelFileError(f"{archive}: {len(index) or 'no'} variables/variables.index members, expected one (a "
                             f"TF-Hub module's variables; what they need bounds what the archive may unpack)")
    member = index[0]
    with tempfile.TemporaryDirectory(prefix=".tfhub-index-") as tmp:
        try:
            data = member.read_at_most(MAX_INDEX_BYTES)
            if data is None:
                raise ModelFileError(f"over {MAX_INDEX_BYTES:,} bytes")
            (Path(tmp) / "variables.index").write_bytes(data)
            entries = TFCheckpoint(Path(tmp) / "variables").entries
        except (ModelFileError, *UNREADABLE) as e:
            reason = str(e).replace(str(Path(tmp) / "variables.index") + ": ", "")
            raise ModelFileError(f"{archive}: member {member.name!r} is not a readable checkpoint index ({reason})") from None
    graph = graph_budget(len(entries))
    for m in members:
        if parts(m) and parts(m)[-1] == GRAPH_MEMBER and m.size > graph:
            raise ModelFileError(f"{archive}: member {m.name!r} has {m.size:,} bytes, more than the {graph:,} a graph "
                                 f"of {len(entries)} variables can need; refusing to unpack it")
    return sum(e.size for e in entries.values()) + len(data) + graph + OTHER_MODULE_BYTES


def _archive_folder(archive: Path) -> Path:
    """$ELMO_CACHE/local/tfhub-archive-<key>: keyed by the archive's resolved path; it holds only a record of the
    module's imported copy and of the archive's size and modification time when it was imported."""
    key = str(archive.resolve())
    return cache_root() / "local" / ("tfhub-archive-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32])


def _stamp(archive: Path) -> str:
    info = archive.stat()
    return f"{info.st_size}:{info.st_mtime_ns}"


def is_module_archive(path: str | os.PathLike) -> bool:
    """A local .tar.gz (or other tar) whose members include a TF-Hub module's saved_model.pb, at most one folder down
    (among its first MAX_MEMBERS members). A damaged archive, or one with more members, counts as one when its name
    says .tar*, so that unpacking it gives the reason."""
    text = os.fspath(path)
    if not (os.path.isfile(text) and is_archive_name(text)) or text.lower().endswith(".zip"):
        return False
    if (_archive_folder(Path(text)) / "imported.json").is_file():
        return True
    try:
        with tarfile.open(text) as tar:
            for count, member in enumerate(tar, 1):
                parts = member.name.replace("\\", "/").strip("/").split("/")
                if parts[-1] in MODULE_FILES and len([p for p in parts if p not in ("", ".")]) <= 2:
                    return True
                if count > MAX_MEMBERS:
                    return True  # refused, with the count, when unpacked
    except (OSError, EOFError, tarfile.TarError, ValueError):
        return True  # refused with the reason when unpacked
    return False


@contextlib.contextmanager
def extracted_module_archive(path: str | os.PathLike) -> Iterator[Path]:
    """The module folder of a local module archive, unpacked (checked, bounded by module_budget) into a temporary
    folder of the cache that is removed afterwards."""
    local = cache_root() / "local"
    local.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tfhub-extract-", dir=local))
    try:
        extracted = extract_archive(path, tmp / "extracted", budget=module_budget)
        yield module_dir_in(extracted, os.fspath(path))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def archive_error(error: ModelFileError, module: Path, archive: Path) -> ModelFileError:
    """`error` about the temporary unpacked `module`, said of the archive it came from."""
    reason = str(error).replace(f"{module} (TF-Hub module): ", "").replace(f"{module}{os.sep}", "")
    return ModelFileError(f"{archive}: the module in the archive does not import, so nothing of it was kept: {reason}")


def _recorded(record: Path, archive: Path) -> Path | None:
    """The imported copy the record names, if the archive is unchanged since and the copy is still there."""
    from .hub_import import MIX_NAME

    try:
        found = json.loads(record.read_text(encoding="utf-8"))
        model = cache_root() / "local" / found["model"] / "model"
        return model if found["stamp"] == _stamp(archive) and (model / MIX_NAME).is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unpacked_module_archive(path: str | os.PathLike) -> Path:
    """The imported model directory (options.json, weights.hdf5, tfhub_module.json) of a local module archive: one
    copy per module content, however often the archive is touched or copied; nothing kept if it does not import."""
    from elmo.files.fileio import atomic_path

    from .hub_import import imported_module_dir

    archive = Path(path)
    folder = _archive_folder(archive)
    record = folder / "imported.json"
    found = _recorded(record, archive)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(folder / ".lock"):
            found = _recorded(record, archive)
            if found is None:
                stamp = _stamp(archive)
                with extracted_module_archive(archive) as module:
                    try:
                        found = imported_module_dir(module, source=os.fspath(path))
                    except ModelFileError as e:
                        raise archive_error(e, module, archive) from None
                with atomic_path(record) as tmp:
                    Path(tmp).write_text(json.dumps({"stamp": stamp, "model": found.parent.name}), encoding="utf-8")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return found
