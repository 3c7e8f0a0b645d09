"""Issue #58 item 1: TensorFlow V2 checkpoints read without TensorFlow, checked against checkpoints TensorFlow wrote
(tests/data/tf, made by scripts/make_tf_references.py in the TensorFlow peer venv; expected.json is what
TensorFlow's own reader gave for every tensor)."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_loaders import assert_damage_refused

from elmo.errors import ModelFileError

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

from elmo.tf import TFCheckpoint, checkpoint_prefix, latest_checkpoint  # noqa: E402
from elmo.tf.table import Table, mask_crc  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
BILM_CKPT = DATA / "bilm-run" / EXPECTED["bilm_tf_test"]["checkpoint"]


def tensors_as_tensorflow_lists_them(ckpt: TFCheckpoint) -> dict:
    """The reader's view in expected.json's terms: dtype, shape, sha256 of the bytes (strings: values in hex)."""
    out = {}
    for name in ckpt.names():
        entry = ckpt.entry(name)
        got = {"dtype": entry.dtype, "shape": list(entry.shape)}
        if entry.dtype == "string":
            got["values"] = [bytes(v).hex() for v in ckpt.read(name).reshape(-1)]
        else:
            got["sha256"] = hashlib.sha256(ckpt.read_bytes(name).tobytes()).hexdigest()
        out[name] = got
    return out


@pytest.mark.parametrize("name", ["dtypes", "sharded", "object"])
def test_every_tensor_as_tensorflow_reads_it(name):
    assert tensors_as_tensorflow_lists_them(TFCheckpoint(DATA / name / "ckpt")) == EXPECTED[name]


def test_the_bilm_tf_training_checkpoint_as_tensorflow_reads_it():
    got = tensors_as_tensorflow_lists_them(TFCheckpoint(BILM_CKPT))
    assert got == EXPECTED["bilm-run"]
    assert "lm/softmax/W" in got and "lm/RNN_1/rnn/multi_rnn_cell/cell_1/lstm_cell/projection/kernel" in got


def test_a_table_of_several_blocks():
    table = Table(DATA / "many" / "ckpt.index")
    index = list(table._entries(table.block(*table._footer(), "index"), "index"))
    assert len(index) > 1  # more than one data block
    got = tensors_as_tensorflow_lists_them(TFCheckpoint(DATA / "many" / "ckpt"))
    digest = hashlib.sha256(json.dumps(got, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    assert (len(got), digest) == (EXPECTED["many"]["count"], EXPECTED["many"]["digest"])
    assert all(got[k] == v for k, v in EXPECTED["many"]["sample"].items())


def test_values_and_dtypes():
    ckpt = TFCheckpoint(DATA / "dtypes" / "ckpt")
    assert ckpt.header.num_shards == 1
    assert ckpt.read("float32/scalar") == np.float32(3.25) and ckpt.read("float32/scalar").shape == ()
    assert ckpt.read("float32/empty").shape == (0, 3)
    assert ckpt.read("int64/global_step").dtype == np.int64 and ckpt.read("int64/global_step") == 935588
    assert ckpt.read("uint64/vector").tolist() == [9, 2**64 - 1]
    assert ckpt.read("bool/vector").tolist() == [True, False, True]
    assert ckpt.read("complex64/vector").tolist() == [1 + 2j, -3.5j]
    assert ckpt.read("string/vector").tolist() == [b"", "ünïcödé".encode(), b"\x00\xff" * 70]
    assert ckpt.read("lm/ünïcode name").tolist() == [1.0, 2.0]
    bf16 = ckpt.read("bfloat16/vector")  # widened exactly: the float32 whose low 16 bits are zero
    assert bf16.dtype == np.float32 and not (bf16.view(np.uint32) & 0xFFFF).any()
    assert ckpt.read("float16/matrix").dtype == np.float16 and ckpt.read("float16/matrix").shape == (3, 4)


def test_a_prefix_named_by_any_of_its_files():
    for suffix in ("", ".index", ".data-00000-of-00001", ".meta"):
        assert checkpoint_prefix(f"{BILM_CKPT}{suffix}") == BILM_CKPT
    assert TFCheckpoint(f"{BILM_CKPT}.index").names() == TFCheckpoint(BILM_CKPT).names()
    with pytest.raises(ModelFileError, match="no tensor 'nope'"):
        TFCheckpoint(BILM_CKPT).read("nope")


def copy_checkpoint(name: str, tmp_path: Path) -> Path:
    shutil.copytree(DATA / name, tmp_path / name)
    return tmp_path / name / "ckpt"


def test_refused_with_a_clear_error(tmp_path):
    with pytest.raises(ModelFileError, match="saved in slices"):
        TFCheckpoint(DATA / "sliced" / "ckpt")
    with pytest.raises(ModelFileError, match=r"no TensorFlow checkpoint here \(expected missing.index"):
        TFCheckpoint(tmp_path / "missing")
    (tmp_path / "model.ckpt-7").write_bytes(b"\x00" * 100)  # a V1 checkpoint is one file, no .index
    with pytest.raises(ModelFileError, match="V1 checkpoint"):
        TFCheckpoint(tmp_path / "model.ckpt-7")
    (tmp_path / "text.index").write_text("not a table" * 10)
    with pytest.raises(ModelFileError, match="not a TensorFlow V2 checkpoint index"):
        TFCheckpoint(tmp_path / "text")


def test_a_snappy_block_is_refused(tmp_path):
    prefix = copy_checkpoint("sharded", tmp_path)
    index = prefix.with_name("ckpt.index")
    table = Table(index)
    offset, size = table._footer()
    data = bytearray(index.read_bytes())
    data[offset + size] = 1  # the index block's compression byte, its checksum made to match
    data[offset + size + 1:offset + size + 5] = struct.pack("<I", mask_crc(table.crc32c.value(bytes(data[offset:offset + size + 1]))))
    index.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="snappy-compressed"):
        TFCheckpoint(prefix)


def test_damaged_tensor_data_fails_its_crc(tmp_path):
    prefix = copy_checkpoint("sharded", tmp_path)
    ckpt = TFCheckpoint(prefix)
    entry = ckpt.entry("a/first")
    shard = ckpt.shard_path(entry.shard)
    data = bytearray(shard.read_bytes())
    data[entry.offset + 3] ^= 0x10
    shard.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="tensor 'a/first' fails its CRC32C check"):
        ckpt.read("a/first")
    assert ckpt.read("c/third").tolist() == [5]  # the other tensors of the shard are still read
    shard.write_bytes(bytes(data[:entry.offset + 2]))
    with pytest.raises(ModelFileError, match="runs past the end of the file"):
        ckpt.read("a/first")


def test_only_the_tensor_read_is_checked(tmp_path):
    """Bytes of the data file outside a tensor are never read for it: a tensor is read by one seek, not the file."""
    prefix = copy_checkpoint("dtypes", tmp_path)
    ckpt = TFCheckpoint(prefix)
    entry = ckpt.entry("float32/matrix")
    shard = ckpt.shard_path(0)
    data = bytearray(b"\xee" * shard.stat().st_size)
    data[entry.offset:entry.offset + entry.size] = shard.read_bytes()[entry.offset:entry.offset + entry.size]
    shard.write_bytes(bytes(data))
    assert hashlib.sha256(ckpt.read_bytes("float32/matrix").tobytes()).hexdigest() == \
        EXPECTED["dtypes"]["float32/matrix"]["sha256"]


def test_a_tensor_is_read_alone_in_chunks(monkeypatch):
    """Reading one tensor reads its own bytes and no others, a chunk at a time (here 16 bytes)."""
    import builtins

    import elmo.tf.checkpoint as module

    reads = []

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def seek(self, offset):
            return self.f.seek(offset)

        def readinto(self, buffer):
            reads.append(self.f.readinto(buffer))
            return reads[-1]

    monkeypatch.setattr(module, "open", lambda *a: Counting(builtins.open(*a)), raising=False)
    monkeypatch.setattr(module, "CHUNK_BYTES", 16)
    ckpt = TFCheckpoint(DATA / "dtypes" / "ckpt")
    assert ckpt.read("float32/matrix").shape == (5, 7)
    assert reads == [16] * 8 + [12] and sum(reads) == ckpt.entry("float32/matrix").size == 140


def test_without_the_crc_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "google_crc32c", None)
    with pytest.raises(ModelFileError, match=r"google-crc32c package, which is not installed: pip install 'elmo-bilm\[tf\]'"):
        TFCheckpoint(BILM_CKPT)


def test_the_newest_checkpoint_of_a_run_directory(tmp_path):
    assert latest_checkpoint(DATA / "bilm-run") == BILM_CKPT
    run = tmp_path / "run"
    shutil.copytree(DATA / "bilm-run", run)
    (run / "checkpoint").write_text(f'model_checkpoint_path: "/elsewhere/old/{BILM_CKPT.name}"\n')
    assert latest_checkpoint(run) == run / BILM_CKPT.name  # a run moved since training
    (run / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-999"\n')
    with pytest.raises(ModelFileError, match="model.ckpt-999: no TensorFlow checkpoint here"):
        latest_checkpoint(run)
    (run / "checkpoint").write_text("something else\n")
    with pytest.raises(ModelFileError, match="no line model_checkpoint_path"):
        latest_checkpoint(run)
    with pytest.raises(ModelFileError, match="cannot read the checkpoint index file"):
        latest_checkpoint(tmp_path)


def read_everything(prefix: Path) -> None:
    ckpt = TFCheckpoint(prefix)
    for name in ckpt.names():
        ckpt.read(name)


@pytest.mark.parametrize("part", ["index", "data-00000-of-00001"])
def test_fuzz_tf_checkpoint(tmp_path, part):
    prefix = copy_checkpoint("dtypes", tmp_path)
    assert_damage_refused(prefix.with_name(f"ckpt.{part}"), lambda: read_everything(prefix), 200, seed=58)
