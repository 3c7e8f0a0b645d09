"""TF-Hub modules that lie (docs/reliability.md, fifth round): every number a module carries is checked as a
checkpoint's are, `elmo import-tf` of a module loads what it wrote before it says so, a failed import leaves nothing
in the cache, the shared default TF-Hub location trusts only the user's own folders, module archives are bounded by
their own variables.index, one cached copy per module content, empty inputs as TF-Hub's graph answers them."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

from tf_index import entry_of, read_items, write_table  # noqa: E402

import elmo.tf.hub_handles as tfhub  # noqa: E402
import elmo.tf.hub_import as hub_module  # noqa: E402
from elmo.cli import main  # noqa: E402
from elmo.errors import InputError, ModelFileError  # noqa: E402
from elmo.hub.archives import MAX_MEMBERS  # noqa: E402
from elmo.tf.checkpoint import TFCheckpoint  # noqa: E402
from elmo.tf.table import crc32c_library, mask_crc  # noqa: E402
from elmo.tfhub import Module  # noqa: E402

DATA = Path(__file__).parent / "data" / "tfhub"
ARCHIVE = DATA / "fixture-module.tar.gz"
KERNEL = "bilm/RNN_0/RNN/MultiRNNCell/Cell0/rnn/lstm_cell/kernel"


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "tfhub-cache"))
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path / "module", filter="data")
    return tmp_path


def set_tensor(module: Path, name: str, values) -> None:
    """Overwrite one variable's bytes in its data shard and its CRC32C in the index: a module that lies with valid
    checksums."""
    prefix = module / "variables" / "variables"
    ckpt = TFCheckpoint(prefix)
    entry = ckpt.entry(name)
    data = np.asarray(values, dtype=np.float32).reshape(entry.shape).tobytes()
    with open(ckpt.shard_path(entry.shard), "r+b") as f:
        f.seek(entry.offset)
        f.write(data)
    crc = mask_crc(crc32c_library().value(data))
    index = prefix.with_name("variables.index")
    items = [(k, entry_of(entry, crc=crc) if k == name.encode() else v) for k, v in read_items(index)]
    write_table(index, items)


def import_refused(work: Path, module: Path | str, capsys) -> str:
    """`elmo import-tf MODULE OUT` exits 2 with one line and writes no OUT."""
    assert main(["import-tf", str(module), str(work / "out")]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "wrote" not in captured.out, err
    assert not (work / "out").exists()
    return err


def cached_models(work: Path) -> list[Path]:
    return sorted((work / "cache").rglob("weights.hdf5")) if (work / "cache").exists() else []


def cache_leftovers(work: Path) -> list[Path]:
    """Everything in the cache but empty folders."""
    return [p for p in (work / "cache").rglob("*") if p.is_file()] if (work / "cache").exists() else []


# -- every number: the mix (count and finiteness), the settings the graph declares, the weights ------------------

@pytest.mark.parametrize(("name", "values", "message"), [
    ("aggregation/weights", [0.3, math.nan, 0.5], "mix weight 1 is nan"),
    ("aggregation/weights", [math.inf, 0.0, 0.5], "mix weight 0 is inf"),
    ("aggregation/scaling", [math.nan], "the mix scaling is nan"),
    ("aggregation/scaling", [-math.inf], "the mix scaling is -inf"),
    (KERNEL, None, "does not load, so nothing was written"),
])
def test_a_module_whose_numbers_are_not_finite_is_refused(work, capsys, name, values, message):
    module = work / "module"
    if values is None:  # one NaN in an LSTM kernel
        values = np.asarray(TFCheckpoint(module / "variables" / "variables").read(name)).copy()
        values.flat[7] = math.nan
    set_tensor(module, name, values)
    err = import_refused(work, module, capsys)
    assert message in err and str(module) in err, err
    with pytest.raises(ModelFileError, match=message):
        Module(module)
    assert cached_models(work) == [] and cache_leftovers(work) == []


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("max_characters_per_token", 2**63, "'char_cnn.max_characters_per_token' must be"),
    ("cell_clip", math.nan, "'lstm.cell_clip' must be a finite non-negative number"),
    ("proj_clip", -3.0, "'lstm.proj_clip' must be a finite non-negative number"),
    ("activation", "sigmoid", "'char_cnn.activation' must be 'relu' or 'tanh'"),
])
def test_settings_the_graph_declares_are_checked(work, capsys, monkeypatch, setting, value, message):
    """What the graph says (max-pool windows, clip constants, the op after the CNN) as lies: refused in one line before
    anything is written (was: import-tf said "wrote", exit 0)."""
    real = hub_module.graph_settings
    monkeypatch.setattr(hub_module, "graph_settings",
                        lambda *a: {**real(*a), setting: (value, "graph: a lying node")})
    err = import_refused(work, work / "module", capsys)
    assert message in err and "the architecture it declares" in err, err
    with pytest.raises(ModelFileError, match=message.replace("(", r"\(")):
        Module(work / "module")
    assert cache_leftovers(work) == []


def test_a_nan_clip_constant_in_the_graph_itself(work, capsys):
    """The cell clip's Const node rewritten to NaN in saved_model.pb (same length: the protobuf stays valid)."""
    from elmo.tf.saved_model import read_saved_model

    graph = work / "module" / "saved_model.pb"
    nodes = read_saved_model(graph)[0].nodes
    loop = "bilm/RNN_0/RNN/MultiRNNCell/Cell0/rnn/while/lstm_cell/"
    bounds = [nodes[n.inputs[1]] for name, n in nodes.items()
              if name.startswith(loop + "clip_by_value") and name.endswith("/Minimum")
              and nodes[n.inputs[0].lstrip("^")].op != "MatMul"]
    data = bytearray(graph.read_bytes())
    name = bounds[0].name.encode()
    start = data.index(b"\n" + bytes([len(name)]) + name)  # the NodeDef's name field (names here are < 128 bytes)
    at = data.index(bounds[0].attrs["value"], start) + bounds[0].attrs["value"].index(struct.pack("<f", 3.0))
    data[at:at + 4] = struct.pack("<f", math.nan)
    graph.write_bytes(bytes(data))
    assert math.isnan(read_saved_model(graph)[0].nodes[bounds[0].name].scalar())
    assert "'lstm.cell_clip' must be a finite non-negative number or null, found nan" in import_refused(
        work, work / "module", capsys)


def test_max_pool_windows_in_the_graph_itself(work, capsys):
    """Every CNN max-pool window in saved_model.pb widened by 70 (same length), so the graph says 120 characters per
    token: refused (was: "wrote", exit 0)."""
    from elmo.tf.saved_model import read_saved_model

    graph = work / "module" / "saved_model.pb"
    nodes = read_saved_model(graph)[0].nodes
    data = bytearray(graph.read_bytes())
    pools = [n for name, n in nodes.items() if name.startswith("bilm/CNN/MaxPool")]
    for node in pools:
        window = node.ints("ksize")[2]
        name = node.name.encode()
        start = data.index(b"\n" + bytes([len(name)]) + name)
        at = data.index(node.attrs["ksize"], start) + node.attrs["ksize"].index(bytes([1, 1, window, 1])) + 2
        data[at] = window + 70
    graph.write_bytes(bytes(data))
    assert len(pools) == 5 and {n.ints("ksize")[2] for n in read_saved_model(graph)[0].nodes.values()
                                if n.name.startswith("bilm/CNN/MaxPool")} == {116, 117, 118, 119, 120}
    err = import_refused(work, work / "module", capsys)
    assert "'char_cnn.max_characters_per_token' must be 50, found 120" in err, err


def imported(work: Path, capsys) -> Path:
    assert main(["import-tf", str(work / "module"), str(work / "imported")]) == 0
    assert "wrote" in capsys.readouterr().out
    return work / "imported"


@pytest.mark.parametrize(("weights", "scaling", "message"), [
    ([0.3, -0.2], 1.7, "2 mix weights for 3 layers"),
    ([0.3, -0.2, 0.5, 0.1], 1.7, "4 mix weights for 3 layers"),
    ([], 1.7, "must be a list of 3 numbers"),
    (None, 1.7, "must be a list of 3 numbers"),
    ([0.3, "x", 0.5], 1.7, "mix weight 1 must be a number"),
    ([0.3, True, 0.5], 1.7, "mix weight 1 must be a number"),
    ([0.3, math.nan, 0.5], 1.7, "mix weight 1 is nan"),
    ([0.3, -0.2, 0.5], math.inf, "the mix scaling is inf"),
    ([0.3, -0.2, 0.5], "1.7", "the mix scaling must be a number"),
])
def test_a_hand_edited_mix_is_refused(work, capsys, weights, scaling, message):
    """tfhub_module.json beside an imported model: the count against options.json's layers, every number finite
    (was: 2 weights dropped a layer through zip, an empty list was an AttributeError, NaN gave NaN outputs)."""
    out = imported(work, capsys)
    record = json.loads((out / "tfhub_module.json").read_text())
    record["mix"] = {"weights": weights, "scaling": scaling}
    (out / "tfhub_module.json").write_text(json.dumps(record))
    with pytest.raises(ModelFileError, match=message) as caught:
        Module(out)
    assert len(str(caught.value).splitlines()) == 1 and "tfhub_module.json" in str(caught.value)


# -- a failed import leaves nothing; one copy per module content --------------------------------------------------

def test_a_failed_import_is_never_cached_or_reused(work):
    module = work / "module"
    set_tensor(module, "aggregation/scaling", [math.nan])
    for _ in range(2):
        with pytest.raises(ModelFileError, match="the mix scaling is nan"):
            Module(module)
        assert cache_leftovers(work) == []
    set_tensor(module, "aggregation/scaling", [1.7])  # mended: a new content, imported once
    assert Module(module).scaling == pytest.approx(1.7)
    assert len(cached_models(work)) == 1


def test_copies_imported_before_the_checks_are_never_reused(work, monkeypatch):
    """The cache key carries the import's version: a copy an older, unchecked import left is not found."""
    monkeypatch.setattr(hub_module, "IMPORT_VERSION", "1")
    older = hub_module.imported_module_dir(work / "module")
    monkeypatch.undo()
    monkeypatch.setenv("ELMO_CACHE", str(work / "cache"))
    current = hub_module.imported_module_dir(work / "module")
    assert current != older and len(cached_models(work)) == 2


def test_one_copy_per_module_content(work):
    """Touched, copied and moved folders, and an archive touched and copied: one imported copy, no unpacked
    leftovers (was: one more full copy per touch)."""
    module = work / "module"
    first = Module(module)(["the cat"], as_dict=True)["elmo"]
    for path in [module / "saved_model.pb", *(module / "variables").iterdir()]:
        os.utime(path, (1_700_000_000, 1_700_000_000))
    shutil.copytree(module, work / "copy")
    for reference in (module, work / "copy", ARCHIVE):
        np.testing.assert_allclose(Module(reference)(["the cat"], as_dict=True)["elmo"], first, atol=1e-6, rtol=0)
    archive = shutil.copyfile(ARCHIVE, work / "again.tar.gz")
    for _ in range(2):
        os.utime(archive, None)
        Module(archive)
    assert len(cached_models(work)) == 1
    assert not [p for p in (work / "cache").rglob("saved_model.pb")]  # archives' unpacked files are removed


def test_an_archive_whose_module_does_not_import_leaves_nothing(work, capsys):
    set_tensor(work / "module", KERNEL, np.full(TFCheckpoint(work / "module" / "variables" / "variables")
                                                 .entry(KERNEL).shape, math.inf))
    archive = work / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(work / "module", arcname="m")
    for _ in range(2):
        with pytest.raises(ModelFileError, match="does not import, so nothing of it was kept") as caught:
            Module(archive)
        assert str(archive) in str(caught.value) and ".tfhub-extract" not in str(caught.value)
        assert cache_leftovers(work) == []
    err = import_refused(work, archive, capsys)
    assert "bad.tar.gz" in err and ".tfhub-extract" not in err, err
    assert cache_leftovers(work) == []


# -- the shared default TF-Hub location ----------------------------------------------------------------------------

def planted(work: Path, monkeypatch) -> Path:
    """A module in the default TF-Hub cache (<temp dir>/tfhub_modules/<sha1 of the handle>), TFHUB_CACHE_DIR unset."""
    import hashlib

    monkeypatch.delenv("TFHUB_CACHE_DIR", raising=False)
    monkeypatch.setattr(tfhub.tempfile, "gettempdir", lambda: str(work / "tmp"))
    folder = work / "tmp" / "tfhub_modules" / hashlib.sha1(b"https://tfhub.dev/google/elmo/3").hexdigest()
    shutil.copytree(work / "module", folder)
    for path in (folder.parent, folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no user ids on this system")
def test_the_default_tfhub_location_trusts_only_the_users_own_folders(work, monkeypatch):
    folder = planted(work, monkeypatch)
    assert tfhub.find_in_tfhub_cache(tfhub.parse_handle("https://tfhub.dev/google/elmo/3")) == folder  # the user's own
    for lie in ("writable", "other user", "root writable"):
        if lie == "writable":
            folder.chmod(0o777)
        elif lie == "root writable":
            folder.chmod(0o755)
            folder.parent.chmod(0o777)
        elif os.geteuid() == 0:
            folder.chmod(0o755)
            os.chown(folder / "saved_model.pb", 4242, 4242)
        else:
            folder.chmod(0o755)
            monkeypatch.setattr(os, "getuid", lambda: 4242)
        with pytest.warns(UserWarning, match="ignored for https://tfhub.dev/google/elmo/3.*: .*(writable by others|owned by user id)"):
            with pytest.raises(Exception, match="ELMO_OFFLINE=1 forbids downloading it"):
                Module("google/elmo/3")
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(folder.parent))  # a location the user named: taken as it is
    assert Module("google/elmo/3").default_pooling == "tokens"


# -- archive bounds: its own variables.index, members counted as they stream, the graph ----------------------------

def tar_with(path: Path, module: Path, extra: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        tar.add(module, arcname="m")
        for name, data in extra:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_archive_is_bounded_by_its_own_variables_index(work):
    """64 MiB of zeros beside the test module (whose index lists 0.75 MB of tensors): refused before anything is
    written (was: the general 8 GiB bound)."""
    budget = (sum(e.size for e in TFCheckpoint(work / "module" / "variables" / "variables").entries.values())
              + hub_module.graph_budget(51))
    archive = tar_with(work / "bomb.tar.gz", work / "module", [("m/assets/zeros", bytes(64 << 20))])
    assert archive.stat().st_size < 1 << 20
    with pytest.raises(ModelFileError, match="unpacks to more than") as caught:
        Module(archive)
    assert int(str(caught.value).split("more than ")[1].split()[0]) < budget + (20 << 20)
    assert cache_leftovers(work) == []


def test_an_archive_without_an_index_or_with_a_damaged_one(work):
    shutil.rmtree(work / "module" / "variables")
    with pytest.raises(ModelFileError, match="no variables/variables.index members, expected one"):
        Module(tar_with(work / "none.tar.gz", work / "module", []))
    with pytest.raises(ModelFileError, match="member 'm/variables/variables.index' is not a readable checkpoint index"):
        Module(tar_with(work / "bad.tar.gz", work / "module", [("m/variables/variables.index", b"not an index")]))
    assert cache_leftovers(work) == []


def test_a_graph_larger_than_its_variables_can_need(work, capsys):
    """saved_model.pb of 22 MB for 51 variables: refused by its size, in an archive before unpacking and in a folder
    before it is read (was: 1 GiB accepted, 15 times its size in memory)."""
    graph = work / "module" / "saved_model.pb"
    limit = hub_module.graph_budget(51)
    with open(graph, "ab") as f:
        f.truncate(limit + 1)
    err = import_refused(work, work / "module", capsys)
    assert f"more than the {limit:,} a module's graph can have for a module of 51 variables" in err, err
    archive = tar_with(work / "graph.tar.gz", work / "module", [])
    with pytest.raises(ModelFileError, match=f"more than the {limit:,} a graph of 51 variables can need"):
        Module(archive)
    assert cache_leftovers(work) == []


@pytest.mark.slow  # about 5 s: 15,000 members written and read
def test_members_are_counted_as_they_stream(work, monkeypatch):
    """MAX_MEMBERS + 5,000 empty members before the module: refused after reading MAX_MEMBERS + 1 headers, not all
    (was: every header read first)."""
    path = work / "flood.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for i in range(MAX_MEMBERS + 5000):
            tar.addfile(tarfile.TarInfo(f"e{i}"))
        tar.add(work / "module", arcname="m")
    read = []
    real = tarfile.TarFile.next
    monkeypatch.setattr(tarfile.TarFile, "next", lambda self: read.append(1) or real(self))
    with pytest.raises(ModelFileError, match=f"{MAX_MEMBERS + 1} members, more than the {MAX_MEMBERS}"):
        Module(path)
    # is_module_archive's look and the unpacking's, each stopped at MAX_MEMBERS + 1 (each open reads one more)
    assert len(read) <= 2 * MAX_MEMBERS + 10
    assert cache_leftovers(work) == []


def test_a_zip_is_counted_from_its_end_record(tmp_path):
    from elmo.hub.archives import extract_archive

    path = tmp_path / "flood.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(MAX_MEMBERS + 1):
            z.writestr(f"e{i}", b"")
    with pytest.raises(ModelFileError, match=f"{MAX_MEMBERS + 1} members, more than the {MAX_MEMBERS}"):
        extract_archive(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- empty inputs ------------------------------------------------------------------------------------------------

def test_empty_inputs_as_the_graph_answers_them(work):
    """TensorFlow 2.21 running the test module (bilm-tf's graph) refuses an empty batch and a batch without tokens
    (InvalidArgumentError); so does Module, in one line. An empty sentence beside others: `default` 0 (TensorFlow
    divides 0 by 0: NaN), every other output as TensorFlow gives it."""
    module = Module(work / "module")
    for call in (lambda: module([]), lambda: module([""]), lambda: module(["   ", ""]),
                 lambda: module({"tokens": np.zeros((0, 3), dtype=object), "sequence_len": []}, signature="tokens"),
                 lambda: module({"tokens": [[], []], "sequence_len": [0, 0]}, signature="tokens")):
        with pytest.raises(InputError, match="nothing to embed"):
            call()
    alone = module(["the cat"], as_dict=True)
    for out in (module(["the cat", ""], as_dict=True),
                module({"tokens": [["the", "cat"], ["", ""]], "sequence_len": [2, 0]}, signature="tokens",
                       as_dict=True)):
        assert np.isfinite(out["default"]).all() and not out["default"][1].any()
        for name, value in alone.items():
            np.testing.assert_allclose(out[name][:1], value, atol=1e-6, rtol=0)
    pooled_all = Module(work / "module", default_pooling="all")(["the cat", ""])
    assert np.isfinite(pooled_all).all()


def test_a_downloaded_module_that_does_not_import_leaves_the_cache(work, monkeypatch):
    """A handle whose download holds a lying module: refused in one line, the download and its unpacked files
    removed, so the next run fetches it again instead of reusing it."""
    from hub_server import serve

    set_tensor(work / "module", "aggregation/weights", [0.3, math.nan, 0.5])
    archive = work / "served.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for item in sorted((work / "module").iterdir()):
            tar.add(item, arcname=item.name)
    monkeypatch.delenv("ELMO_OFFLINE")
    with serve({"/google/elmo/3": archive.read_bytes()}) as server:
        monkeypatch.setattr(tfhub, "TFHUB_ROOT", server.url("").rstrip("/"))
        for attempt in (1, 2):
            with pytest.raises(ModelFileError, match="mix weight 1 is nan") as caught:
                Module("https://tfhub.dev/google/elmo/3")
            assert "does not import, so it was removed from the cache" in str(caught.value)
            assert server.gets["/google/elmo/3"] == attempt
            assert [p for p in cache_leftovers(work) if p.name not in (".lock", ".lock.owner")] == []
