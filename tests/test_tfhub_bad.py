"""Issue #63 item 5: bad TF-Hub modules and inputs are one clear line (exit 2 at the command line), and nothing is
written outside the cache: variables that do not form an ELMo, a truncated or hostile .tar.gz, a saved_model.pb
that is not one, wrong calls of the drop-in (a handle in no cache offline: tests/test_tfhub_hub.py)."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

import elmo.tf.hub_import as hub_module  # noqa: E402
from elmo.cli import main  # noqa: E402
from elmo.errors import InputError, ModelFileError  # noqa: E402
from elmo.tf.checkpoint import TFCheckpoint  # noqa: E402
from elmo.tfhub import Module  # noqa: E402

DATA = Path(__file__).parent / "data"
ARCHIVE = DATA / "tfhub" / "fixture-module.tar.gz"


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "tfhub-cache"))
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    (tmp_path / "in.txt").write_text("the cat\n")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path / "module", filter="data")
    return tmp_path


def refused(work: Path, model: Path | str, capsys) -> str:
    """`elmo embed --model MODEL` exits 2 with one line and writes no output."""
    assert main(["embed", str(work / "in.txt"), str(work / "out.hdf5"), "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (work / "out.hdf5").exists()
    return err


def outside_cache(work: Path) -> list[Path]:
    keep = {work / "cache", work / "in.txt", work / "module"}
    return [p for p in work.iterdir() if p not in keep]


def test_variables_of_something_else(work, capsys):
    """A bilm-tf training checkpoint in a module's place: no bilm/ variables."""
    variables = work / "module" / "variables"
    shutil.rmtree(variables)
    variables.mkdir()
    run = DATA / "tf" / "bilm-run"
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copyfile(run / f"model.ckpt-120{suffix}", variables / f"variables{suffix}")
    assert "not an ELMo module: no variable 'bilm/char_embed'" in refused(work, work / "module", capsys)
    assert outside_cache(work) == []


class Without(TFCheckpoint):
    """The module's checkpoint with its index edited: `drop` names removed, `add` names (shape) added."""

    drop: tuple[str, ...] = ()
    add: dict[str, tuple[int, ...]] = {}

    def __init__(self, prefix):
        super().__init__(prefix)
        import dataclasses

        for name in self.drop:
            del self.entries[name]
        model = self.entries["bilm/char_embed"]
        for name, shape in self.add.items():
            self.entries[name] = dataclasses.replace(model, name=name, shape=shape)


@pytest.mark.parametrize(("drop", "add", "message"), [
    (("bilm/CNN_high_1/b_carry",), {}, "missing bilm/CNN_high_1/b_carry"),
    (("bilm/RNN_1/RNN/MultiRNNCell/Cell1/rnn/lstm_cell/kernel",), {}, "missing bilm/RNN_1/RNN/MultiRNNCell/Cell1"),
    (("aggregation/scaling",), {}, "no variable 'aggregation/scaling'"),
    (("bilm/CNN/W_cnn_2",), {}, "numbered 0, 1, ... without gaps"),
    ((), {"bilm/CNN/W_cnn_9": (1, 3, 4, 8)}, "numbered 0, 1, ... without gaps"),
    ((), {"bilm/extra/thing": (4,)}, "variables an ELMo module does not have: bilm/extra/thing"),
    ((), {"aggregation/weights": (4,)}, "'aggregation/weights' has shape [4], but the other variables make it [3]"),
    ((), {"bilm/CNN_proj/W_proj": (120, 17)}, "'bilm/CNN_proj/W_proj' has shape [120, 17], but the other variables make it [124, 16]"),
    ((), {"bilm/CNN/W_cnn_1": (1, 2, 5, 8)}, "'bilm/CNN/W_cnn_1' has shape [1, 2, 5, 8], but the other variables make it [1, 2, 4, 8]"),
    ((), {"bilm/char_embed": (300, 4)}, "bilm/char_embed has 300 rows"),
])
def test_variables_that_do_not_form_an_elmo(work, capsys, monkeypatch, drop, add, message):
    monkeypatch.setattr(Without, "drop", drop)
    monkeypatch.setattr(Without, "add", add)
    monkeypatch.setattr(hub_module, "TFCheckpoint", Without)
    err = refused(work, work / "module", capsys)
    assert message in err and str(work / "module") in err, err
    assert not list((work / "cache").rglob("weights.hdf5"))


def test_a_truncated_archive(work, capsys):
    data = ARCHIVE.read_bytes()
    (work / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    err = refused(work, work / "cut.tar.gz", capsys)
    assert "damaged" in err and "cut.tar.gz" in err, err
    assert not list((work / "cache").rglob("saved_model.pb"))


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


@pytest.mark.parametrize(("member", "message"), [("../escaped", "outside the archive"), ("/abs/escaped", "absolute path"),
                                                 ("link", "link or special file")])
def test_a_hostile_archive(work, capsys, member, message):
    info = tarfile.TarInfo(member)
    if member == "link":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    graph = (work / "module" / "saved_model.pb").read_bytes()
    archive = _tar(work / "hostile.tar.gz", [(tarfile.TarInfo("saved_model.pb"), graph), (info, b"x")])
    err = refused(work, archive, capsys)
    assert message in err, err
    assert outside_cache(work) == [archive] and not Path("/abs/escaped").exists()


@pytest.mark.parametrize("content", [b"", b'{"not": "a graph"}', bytes(range(256)) * 4, b"\x08\x01"])
def test_a_saved_model_pb_that_is_not_one(work, capsys, content):
    (work / "module" / "saved_model.pb").write_bytes(content)
    err = refused(work, work / "module", capsys)
    assert "saved_model.pb" in err and ("not a SavedModel" in err or "damaged" in err or "protobuf" in err), err


def test_import_tf_refuses_checkpoint_flags_for_a_module(work, capsys):
    assert main(["import-tf", str(work / "module"), str(work / "out"), "--vocab", "v.txt"]) == 2
    assert "TF-Hub module carries its architecture" in capsys.readouterr().err
    assert not (work / "out").exists()


def test_wrong_calls_of_the_drop_in(work):
    module = Module(work / "module")
    with pytest.raises(InputError, match="signatures default, tokens"):
        module(["a b"], signature="elmo")
    with pytest.raises(InputError, match="1-D list of sentences"):
        module("the cat")
    with pytest.raises(InputError, match="'tokens' and 'sequence_len'"):
        module({"tokens": [["a"]]}, signature="tokens")
    with pytest.raises(InputError, match="from 0 to max_length 2"):
        module({"tokens": [["a", "b"]], "sequence_len": [3]}, signature="tokens")
    with pytest.raises(InputError, match=r"\[batch, max_length\]"):
        module({"tokens": ["a", "b"], "sequence_len": [2]}, signature="tokens")
    with pytest.raises(InputError, match="not UTF-8"):
        module([b"\xff\xfe"])
    with pytest.raises(InputError, match="default_pooling"):
        Module(work / "module", default_pooling="max")


def test_a_model_that_is_not_a_module(work):
    with pytest.raises(ModelFileError, match="not a TF-Hub module .* use elmo.Embedder or elmo.Elmo"):
        Module("default")  # the bundled model: options.json + weights.hdf5, no mix


def test_damaged_graphs_are_refused_or_read_never_crash(work):
    """Cuts and flipped bytes anywhere in a real saved_model.pb: a ModelFileError naming the file, or a graph read
    whose settings are then taken from what it still shows (never another exception)."""
    import random

    from elmo.tf.saved_model import read_saved_model

    graph = (work / "module" / "saved_model.pb").read_bytes()
    damaged = work / "module" / "saved_model.pb"
    rng = random.Random(63)
    outcomes = set()
    for trial in range(60):
        data = bytearray(graph)
        if trial % 2:
            del data[rng.randrange(len(data)):]
        else:
            for _ in range(4):
                data[rng.randrange(len(data))] = rng.randrange(256)
        damaged.write_bytes(bytes(data))
        try:
            read_saved_model(damaged)
            hub_module.read_hub_module(work / "module")
            outcomes.add("read")
        except ModelFileError as e:
            assert str(damaged) in str(e) or str(work / "module") in str(e), e
            outcomes.add("refused")
    assert "refused" in outcomes
