"""The one rule for every path a command writes: what it may be, and that it is none of the command's inputs.

Every writing command of `elmo` calls `check_not_input` for each path it writes, before any work, with
or without --overwrite, and the writers underneath (`fileio.atomic_path`, `fileio.atomic_dir`) apply
`check_output_kind` again at the moment of writing. tests/test_writers.py walks every command of the
CLI that writes and runs each against its input, a FIFO, a device node, a directory and control
characters.
"""

from __future__ import annotations

import glob
import os
import stat

from elmo.errors import InputError

CONTROL_CHARACTERS = frozenset(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))  # C0, DEL and C1


def check_path_text(path: str | os.PathLike, flag: str = "a path") -> str:
    """`path` as a str, refused in one line naming `flag` if it holds a NUL (no file name can) or another
    control character (a name that rewrites the terminal or splits a log line is never what was meant)."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    bad = next((c for c in text if c in CONTROL_CHARACTERS), None)
    if bad == "\0":  # os.path.realpath raises a bare ValueError on it
        raise InputError(f"{flag}: {text!r} holds a NUL character, which no file name can contain")
    if bad is not None:
        raise InputError(f"{flag}: {text!r} holds the control character {bad!r}; give a path without control "
                         "characters")
    return text


def check_output_kind(output: str | os.PathLike, flag: str | None = None, folder: bool = False) -> str:
    """Refuse writing over something that is not what a writer replaces: for a file output anything but a
    regular file (a directory, a FIFO, a device node, a socket: renaming onto it would replace it, or
    writing into it would block or reach a device); for a `folder` output anything but a directory.
    A symbolic link is judged by what it points to. Returns `output` as a str."""
    text = check_path_text(output, flag or "OUTPUT")
    name = f"{text} ({flag})" if flag else text
    try:
        mode = os.stat(text).st_mode
    except FileNotFoundError:
        return text  # new (or a dangling link, which the rename replaces)
    except OSError as e:
        raise InputError(f"{name}: cannot be examined ({e.strerror}); choose another path to write") from None
    if folder and not stat.S_ISDIR(mode):
        raise InputError(f"{name}: is {_kind(mode)}, expected a folder to write")
    if not folder and not stat.S_ISREG(mode):
        raise InputError(f"{name}: is {_kind(mode)}, not a regular file; only a regular file is replaced by a "
                         "write, choose a file path")
    return text


def _kind(mode: int) -> str:
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character "
             "device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a file")]
    return next((what for test, what in kinds if test(mode)), "not a file")


def _real(path: str | os.PathLike, flag: str = "a path") -> str:
    return os.path.realpath(os.path.abspath(check_path_text(path, flag)))


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def check_not_input(output: str | os.PathLike, inputs: dict[str, object], flag: str = "OUTPUT",
                    folder: bool = False) -> None:
    """The one rule every writing command applies to each path it writes, before any work, with or
    without --overwrite: no control characters in it (`check_path_text`); if it exists, a regular file
    (a `folder` output: a directory; `check_output_kind`); and not one of the command's inputs, nor (a
    `folder` output) holding one, lying inside one or being the same folder: writing it would destroy
    what the command reads. tests/test_writers.py runs every writing command of `elmo` against it.

    `inputs` maps a flag name to a path or a list of paths (globs are expanded); None is skipped.
    """
    check_output_kind(output, flag, folder)
    out = _real(output, flag)
    for name, value in inputs.items():
        if value is None:
            continue
        for given in ([value] if isinstance(value, (str, os.PathLike)) else list(value)):
            matches = glob.glob(os.fspath(given)) if glob.has_magic(os.fspath(given)) else [os.fspath(given)]
            for path in matches:
                real = _real(path, name)
                if _same(out, real):
                    raise InputError(f"{output}: is {name} itself ({path}); writing {flag} there would destroy "
                                     f"the input, choose another {flag}")
                if folder and real.startswith(out.rstrip(os.sep) + os.sep):
                    raise InputError(f"{output}: {flag} holds {name} ({path}); writing the folder could replace or "
                                     f"remove it, choose another {flag}")
                if os.path.isdir(real) and out.startswith(real.rstrip(os.sep) + os.sep):
                    raise InputError(f"{output}: {flag} lies inside {name} ({path}); choose a folder outside it")
