"""TF-Hub handles (`https://tfhub.dev/google/elmo/3`, Kaggle Models' forms) and module archives as local module folders.

A handle is looked up, in order and without the network, in TF-Hub's own cache (`$TFHUB_CACHE_DIR`, else
`<system temp dir>/tfhub_modules`: one folder per handle, named by the sha1 of the handle string as the user wrote
it, tensorflow_hub's compressed resolver), then in ours; else the module is downloaded as TF-Hub's compressed format
(`<handle>?tf-hub-format=compressed`, a .tar.gz; tfhub.dev now redirects it to Kaggle Models) through the same
locked, verified, resumable cache as every published file (elmo.hub.fetch), and unpacked beside it, checked like
any archive (elmo.hub.archives). A local module .tar.gz is unpacked once into `$ELMO_CACHE/local/`.
Nothing here reads a module: elmo.tf.hub_module does.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ..errors import ModelFileError, OfflineError
from .archives import extract_archive, is_archive_name
from .cache import OFFLINE_ENV, CacheEntry, cache_root, offline

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


def find_in_tfhub_cache(handle: Handle) -> Path | None:
    """The module TF-Hub already downloaded for this handle (any spelling), or None."""
    root = tfhub_cache_dir()
    for spelling in handle.spellings():
        folder = root / hashlib.sha1(spelling.encode("utf-8")).hexdigest()
        if (folder / MODULE_FILES[0]).is_file():
            return folder
    return None


def fetch_tfhub_module(handle: Handle, timeout: float | None = None) -> Path:
    """The local module folder of a handle: TF-Hub's cache, ours, or downloaded (module docstring)."""
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
    from .download import entry_lock, unpack_entry
    from .fetch import fetch

    archive = fetch(handle.download_url, timeout)
    with entry_lock(entry):
        if not entry.extracted.is_dir():
            unpack_entry(entry, archive)  # a damaged archive leaves the cache
    return module_dir_in(entry.extracted, handle.text)


def _archive_folder(archive: Path) -> Path:
    """$ELMO_CACHE/local/tfhub-archive-<key>: keyed by the archive's resolved path, size and modification time."""
    stat = archive.stat()
    key = f"{archive.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    return cache_root() / "local" / ("tfhub-archive-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32])


def is_module_archive(path: str | os.PathLike) -> bool:
    """A local .tar.gz (or other tar) whose members include a TF-Hub module's saved_model.pb, at most one folder down.
    A damaged archive counts as one when its name says .tar*, so that unpacking it gives the reason."""
    text = os.fspath(path)
    if not (os.path.isfile(text) and is_archive_name(text)) or text.lower().endswith(".zip"):
        return False
    if (_archive_folder(Path(text)) / "extracted").is_dir():
        return True
    try:
        with tarfile.open(text) as tar:
            for member in tar:
                parts = member.name.replace("\\", "/").strip("/").split("/")
                if parts[-1] in MODULE_FILES and len([p for p in parts if p not in ("", ".")]) <= 2:
                    return True
    except (OSError, EOFError, tarfile.TarError, ValueError):
        return True  # refused with the reason when unpacked
    return False


def unpacked_module_archive(path: str | os.PathLike) -> Path:
    """The module folder of a local module archive, unpacked (checked, atomically) once into $ELMO_CACHE/local/."""
    archive = Path(path)
    folder = _archive_folder(archive)
    extracted = folder / "extracted"
    if not extracted.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(folder / ".lock"):
            if not extracted.is_dir():
                extract_archive(archive, extracted)
    return module_dir_in(extracted, os.fspath(path))
