"""Reading an HDF5 file that must hold its own data: every loader opens model files through here.

HDF5 lets a file borrow bytes from elsewhere: an external link (a name resolved in another file),
external raw storage (a dataset whose bytes are read from any file on disk, /etc/passwd included)
and virtual datasets (a dataset assembled from other files). A model, softmax or cache file never
needs them, and each would let a downloaded file read local files into model weights, so each is
refused by name before any data is read.
"""

from __future__ import annotations

import os

import h5py

from elmo.errors import ElmoError, ModelFileError


def open_hdf5(path: str | os.PathLike, what: str, error: type[ElmoError] = ModelFileError) -> h5py.File:
    """`path` open read-only, after `check_self_contained`; `what` names the kind of file in the error."""
    path = os.fspath(path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise error(f"{path}: not an HDF5 {what} ({reason})") from None
    try:
        check_self_contained(f, path, error)
    except BaseException:
        f.close()
        raise
    return f


def check_self_contained(f: h5py.File, path: str, error: type[ElmoError] = ModelFileError) -> None:
    """Refuse external links, external raw storage and virtual datasets, naming the first one found."""

    def link(name: str, info) -> str | None:  # a non-None return stops the walk (raising inside it breaks h5py)
        if isinstance(info, h5py.ExternalLink):
            return (f"'{name}' is an HDF5 external link to {info.filename}:{info.path}; a model file must hold "
                    "its own data, refused")
        if not isinstance(info, (h5py.HardLink, h5py.SoftLink)):
            return f"'{name}' is an HDF5 link of an unknown kind ({type(info).__name__}); refused"
        return None

    def dataset(name: str, obj) -> str | None:
        if not isinstance(obj, h5py.Dataset):
            return None
        if obj.external:
            return (f"dataset '{name}' keeps its bytes in another file ({obj.external[0][0]!r}, HDF5 external "
                    "storage); a model file must hold its own data, refused")
        if obj.is_virtual:
            sources = ", ".join(sorted({m.file_name for m in obj.virtual_sources()}))[:200]
            return (f"dataset '{name}' is an HDF5 virtual dataset drawn from {sources}; a model file must hold "
                    "its own data, refused")
        return None

    try:
        problem = f.visititems_links(_guarded(link)) or f.visititems(_guarded(dataset))
    except (OSError, RuntimeError, KeyError, ValueError, TypeError, SystemError) as e:  # damaged structure
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise error(f"{path}: a damaged HDF5 file ({type(e).__name__}: {reason})") from None
    if problem:
        raise error(f"{path}: {problem}")


def _guarded(check):
    """`check` for h5py's visit functions: an exception inside a visit callback corrupts h5py's lock
    (SystemError), so a damaged object is reported as the walk's result instead."""

    def visit(name: str, item) -> str | None:
        try:
            return check(name, item)
        except Exception as e:  # noqa: BLE001  (any error of a damaged object is one line)
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            return f"a damaged HDF5 file ('{name}': {type(e).__name__}: {reason})"

    return visit
