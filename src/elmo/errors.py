"""Exceptions with messages that say what was expected, what was found and where.

Every error the package raises on purpose is an `ElmoError` (the CLI prints it as one line and exits 2),
and also the builtin a Python user would catch for the same trouble, so `except ValueError` and
`except FileNotFoundError` work as they do around the standard library:

    ElmoError              Exception     base class; never raised itself
    InputError             ValueError    a corpus, sentence, argument or other user input that cannot be used
    ModelFileError         ValueError    an options.json, weights.hdf5, vocabulary or softmax file that cannot be used
    InputFileNotFound      FileNotFoundError (and InputError): an input file or folder that does not exist
    ModelFileNotFound      FileNotFoundError (and ModelFileError): a model file that does not exist
    OutputError            OSError       an output that cannot be written (a full disk, a refused write)
    DownloadError          OSError       a remote file not fetched (HTTP status, network, checksum), as requests'
                                         errors are OSErrors
    OfflineError           ConnectionError (and DownloadError): the network may not be used and no cache has it
    TrainingError          RuntimeError  training cannot go on (elmo.training)
    Int8Unavailable        RuntimeError  no trusted int8 kernel on this CPU or torch build (elmo.model.int8)

Code that catches a builtin around calls into the package re-raises `ElmoError` first, so an error that
already names the file is never wrapped twice. A wrong Python type handed to the low-level
`batch_to_ids` stays a plain TypeError, as Python's own functions raise.
"""


# Control characters (C0 but tab, DEL, C1) as escapes: a name or path from a user may hold NUL, ESC (a terminal's
# colour and cursor codes) or newlines, and a message that prints them raw is not one line or not what it says.
_ESCAPES = {c: {"\n": "\\n", "\r": "\\r"}.get(chr(c), f"\\x{c:02x}")
            for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x09}


def escape_controls(text: str) -> str:
    """`text` with every control character but tab written as its escape (NUL -> \\x00, newline -> \\n)."""
    return text.translate(_ESCAPES)


class ElmoError(Exception):
    """Base class: the CLI prints these as one clear line instead of a traceback; control characters in the
    message (from a name or path a user gave) are escaped, so it stays one line and prints what it says."""

    def __str__(self) -> str:
        return escape_controls(super().__str__())


class ModelFileError(ElmoError, ValueError):
    """An options.json, weights.hdf5, vocabulary or softmax file that cannot be used."""


class InputError(ElmoError, ValueError):
    """A corpus, sentence file or other user input that cannot be used."""


class MissingFileError(ElmoError, FileNotFoundError):
    """A file or folder the package was pointed at that does not exist (the base of the two below)."""


class InputFileNotFound(MissingFileError, InputError):
    """An input file or folder that does not exist: an InputError and a FileNotFoundError."""


class ModelFileNotFound(MissingFileError, ModelFileError):
    """A model file that does not exist: a ModelFileError and a FileNotFoundError."""


def not_found_error(error: type[ElmoError]) -> type[ElmoError]:
    """The missing-file twin of `error` (ModelFileError -> ModelFileNotFound, else InputFileNotFound)."""
    if issubclass(error, MissingFileError):
        return error
    return ModelFileNotFound if issubclass(error, ModelFileError) else InputFileNotFound


class OutputError(ElmoError, OSError):
    """An output that cannot be written: the disk is full, or the file system refuses the write."""


class DownloadError(ElmoError, OSError):
    """A model file or archive that could not be fetched: the message names the URL and what went wrong."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class OfflineError(DownloadError, ConnectionError):
    """A file asked for while the network may not be used (ELMO_OFFLINE=1) and found in no cache."""
