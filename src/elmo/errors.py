"""Exceptions with messages that say what was expected, what was found and where."""


class ElmoError(Exception):
    """Base class: the CLI prints these as one clear line instead of a traceback."""


class ModelFileError(ElmoError):
    """An options.json, weights.hdf5, vocabulary or softmax file that cannot be used."""


class InputError(ElmoError):
    """A corpus, sentence file or other user input that cannot be used."""


class OutputError(ElmoError):
    """An output that cannot be written: the disk is full, or the file system refuses the write."""


class DownloadError(ElmoError):
    """A model file or archive that could not be fetched: the message names the URL and what went wrong."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class OfflineError(DownloadError):
    """A file asked for while the network may not be used (ELMO_OFFLINE=1) and found in no cache."""
