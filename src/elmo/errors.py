"""Exceptions with messages that say what was expected, what was found and where."""


class ElmoError(Exception):
    """Base class: the CLI prints these as one clear line instead of a traceback."""


class ModelFileError(ElmoError):
    """An options.json, weights.hdf5, vocabulary or softmax file that cannot be used."""


class InputError(ElmoError):
    """A corpus, sentence file or other user input that cannot be used."""


class OutputError(ElmoError):
    """An output that cannot be written: the disk is full, or the file system refuses the write."""
