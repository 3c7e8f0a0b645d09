"""`elmo.errors`: every error is an `ElmoError` and the builtin a Python user catches for the same trouble
(the mapping in its docstring); each public entry point's bad input is caught both ways, and the CLI
prints it as one line and exits 2. Needs nothing from ../shared (the micro model, the bundled one)."""

from __future__ import annotations

import json
import socket

import pytest
import torch
from conftest import MICRO

from elmo import Elmo, Embedder, ScalarMix, load_bilm
from elmo.cli import main as cli_main
from elmo.errors import (
    DownloadError,
    ElmoError,
    InputError,
    InputFileNotFound,
    ModelFileError,
    ModelFileNotFound,
    OfflineError,
    OutputError,
)
from elmo.files.fileio import atomic_path, check_file
from elmo.formats.lm_vocab import Vocab
from elmo.hub.fetch import fetch
from elmo.model.bilm import BiLM
from elmo.model.int8 import Int8Unavailable
from elmo.model.options import BiLMConfig
from elmo.models import resolve
from elmo.training import TrainingError

BUILTIN = [(InputError, ValueError), (ModelFileError, ValueError), (InputFileNotFound, FileNotFoundError),
           (InputFileNotFound, InputError), (ModelFileNotFound, FileNotFoundError), (ModelFileNotFound, ModelFileError),
           (OutputError, OSError), (DownloadError, OSError), (OfflineError, ConnectionError),
           (OfflineError, DownloadError), (TrainingError, RuntimeError), (Int8Unavailable, RuntimeError)]


@pytest.mark.parametrize("error,builtin", BUILTIN)
def test_each_error_is_an_elmo_error_and_its_builtin(error, builtin):
    made = error("https://x/y", "why") if issubclass(error, DownloadError) else error("where: what was found")
    with pytest.raises(builtin):
        raise made
    assert isinstance(made, ElmoError)
    assert str(made) == ("https://x/y: why" if issubclass(error, DownloadError) else "where: what was found")


@pytest.fixture(scope="module")
def micro_dir(tmp_path_factory):
    """options.json + weights.hdf5 of the micro biLM (random weights)."""
    from elmo.formats.weights import save_bilm

    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("micro")
    save_bilm(BiLM(BiLMConfig.from_options(MICRO)), d / "options.json", d / "weights.hdf5")
    return d


def bad_json(tmp_path):
    (tmp_path / "options.json").write_text("{not json")
    return tmp_path / "options.json"


# (what is called, the builtin a user would catch, the ElmoError class, words of the message)
ENTRY_POINTS = [
    (lambda d, t: load_bilm(t / "none.json", d / "weights.hdf5"), FileNotFoundError, ModelFileNotFound, "not found"),
    (lambda d, t: load_bilm(d / "options.json", t / "none.hdf5"), FileNotFoundError, ModelFileNotFound, "not found"),
    (lambda d, t: load_bilm(bad_json(t), d / "weights.hdf5"), ValueError, ModelFileError, "not valid JSON"),
    (lambda d, t: load_bilm(d / "options.json", d / "options.json"), ValueError, ModelFileError, "not an HDF5"),
    (lambda d, t: resolve(t / "no-such-dir"), FileNotFoundError, ModelFileNotFound, "neither a model directory"),
    (lambda d, t: resolve("no-such-name"), ValueError, ModelFileError, "neither a model directory"),
    (lambda d, t: resolve(options=d / "options.json", weights=t / "w.hdf5"), FileNotFoundError, InputFileNotFound,
     "file not found"),
    (lambda d, t: Embedder.from_model(t / "nothing"), FileNotFoundError, ModelFileNotFound, "neither"),
    (lambda d, t: Embedder.from_files(d / "options.json", d / "weights.hdf5", batch_size=0), ValueError, InputError,
     "batch_size must be a positive integer"),
    (lambda d, t: Elmo(d / "options.json", d / "weights.hdf5", num_output_representations=-1), ValueError,
     InputError, "num_output_representations"),
    (lambda d, t: Elmo(None, None, 1), ValueError, InputError, "needs options_file and weight_file"),
    (lambda d, t: ScalarMix(3, initial_scalar_parameters=[0.0]), ValueError, InputError, "has 1 values, expected 3"),
    (lambda d, t: check_file(t / "corpus.txt"), FileNotFoundError, InputFileNotFound, "file not found"),
    (lambda d, t: atomic_path(t / "no" / "out.h5").__enter__(), FileNotFoundError, InputFileNotFound,
     "does not exist"),
    (lambda d, t: Vocab.load(t / "vocab.txt"), FileNotFoundError, ModelFileNotFound, "vocabulary file not found"),
]


@pytest.mark.parametrize("call,builtin,error,needle", ENTRY_POINTS)
def test_bad_input_is_caught_as_the_builtin_and_as_elmo_error(micro_dir, tmp_path, call, builtin, error, needle):
    with pytest.raises(builtin, match=needle) as caught:
        call(micro_dir, tmp_path)
    assert isinstance(caught.value, error) and isinstance(caught.value, ElmoError)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the with-block ends: a refused connection


def test_a_failed_download_is_an_os_error_and_offline_a_connection_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ELMO_OFFLINE", raising=False)
    url = f"http://127.0.0.1:{closed_port()}/m/options.json"
    with pytest.raises(OSError, match="127.0.0.1") as caught:
        fetch(url, timeout=5)
    assert isinstance(caught.value, DownloadError)
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    with pytest.raises(ConnectionError) as caught:
        fetch(url)
    assert isinstance(caught.value, OfflineError)


@pytest.mark.parametrize("argv,needle", [
    (lambda t: ["embed", str(t / "missing.txt"), str(t / "out.hdf5")], "missing.txt: file not found"),
    (lambda t: ["vocab", str(t / "missing.txt"), "-o", str(t / "vocab.txt")], "missing.txt"),
    (lambda t: ["embed", str(t / "in.txt"), str(t / "out.hdf5"), "--model", str(t / "no-model")],
     "neither a model directory"),
])
def test_the_cli_prints_one_line_and_exits_2(tmp_path, capsys, argv, needle):
    (tmp_path / "in.txt").write_text("a b\n")
    assert cli_main(argv(tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("elmo ") and ": error: " in err[0] and needle in err[0], err


def test_options_json_refusals_are_value_errors(tmp_path):
    broken = dict(MICRO, lstm={**MICRO["lstm"], "dim": "wide"})
    (tmp_path / "options.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="dim") as caught:
        load_bilm(tmp_path / "options.json", None)
    assert isinstance(caught.value, ModelFileError)
