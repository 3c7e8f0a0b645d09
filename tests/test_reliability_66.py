"""Issue #66, the fourth adversarial round (docs/reliability.md, "Fourth round"): one section per class; the
cases are members of each class, not only the ones the issue saw. Class 6 (saved framework models) is tested
beside the integrations."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from test_hub_download import hub_env  # noqa: F401 (fixture)

from elmo.errors import ElmoError, InputError, ModelFileError

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

from tf_index import DTYPE_CODES, entry_of, field_bytes, field_int, read_items, write_table

from elmo.tf import TFCheckpoint
from elmo.tf.bilm_import import BilmCheckpoint, import_bilm_checkpoint
from elmo.tf.proto import parse_entry

TF_DATA = Path(__file__).parent / "data" / "tf"
BILM_PREFIX = "model.ckpt-120"


def bilm_run(tmp_path: Path) -> Path:
    """A copy of the bilm-tf training run of tests/data/tf (its checkpoint, `checkpoint` file and options)."""
    run = tmp_path / "bilm-run"
    shutil.copytree(TF_DATA / "bilm-run", run)
    return run


def rewrite_entry(prefix: Path, name: str, **changes) -> None:
    """Change one tensor's index entry (shape, size, dtype, ...), every checksum of the index kept valid."""
    index = prefix.with_name(prefix.name + ".index")
    items = read_items(index)
    key = name.encode("utf-8")
    entry = parse_entry(name, dict(items)[key], name)
    write_table(index, [(k, entry_of(entry, **changes) if k == key else v) for k, v in items])


def one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message and "Traceback" not in message, message
    return message


# ---- #66.1 a size a file claims is checked against the file before anything is allocated -----------------------

def test_the_rewritten_index_reads_as_the_original(tmp_path):
    run = bilm_run(tmp_path)
    index = run / f"{BILM_PREFIX}.index"
    write_table(index, read_items(index))
    ckpt, original = TFCheckpoint(run / BILM_PREFIX), TFCheckpoint(TF_DATA / "bilm-run" / BILM_PREFIX)
    assert ckpt.entries == original.entries
    assert (ckpt.read("lm/softmax/W") == original.read("lm/softmax/W")).all()


@pytest.mark.parametrize("shape", [(1 << 20, 1 << 18), (1 << 38,), (1 << 30, 1 << 29)])
def test_a_tensor_larger_than_its_data_file_is_refused_before_allocating(tmp_path, monkeypatch, shape):
    """A 1 TiB (and larger) claim whose shape agrees with its size: compared with the file, never allocated."""
    import numpy as np

    import elmo.tf.checkpoint as module

    prefix = bilm_run(tmp_path) / BILM_PREFIX
    size = 4 * int(np.prod(shape, dtype=object))
    rewrite_entry(prefix, "lm/char_embed", shape=shape, size=size)
    ckpt = TFCheckpoint(prefix)
    monkeypatch.setattr(module.np, "empty", lambda *a, **k: pytest.fail("allocated before the size was checked"))
    with pytest.raises(ModelFileError, match=r"claims bytes .* runs past the end of the file \(195,688 bytes"):
        ckpt.read("lm/char_embed")


@pytest.mark.parametrize("shape", [(1 << 32, 1 << 32, 4), (1 << 62, 4), (1 << 63, 2), (3, 1 << 62, 1 << 3)])
def test_dimensions_whose_product_overflows_are_refused(tmp_path, shape):
    """int64 arithmetic wrapped these to 0 bytes, which then passed the size check."""
    prefix = bilm_run(tmp_path) / BILM_PREFIX
    rewrite_entry(prefix, "lm/CNN/b_cnn_0", shape=shape, size=0)
    with pytest.raises(ModelFileError) as error:
        TFCheckpoint(prefix)
    assert "lm/CNN/b_cnn_0" in one_line(error.value)


def test_a_huge_dimension_of_an_empty_tensor_is_refused(tmp_path):
    prefix = bilm_run(tmp_path) / BILM_PREFIX
    rewrite_entry(prefix, "lm/CNN/b_cnn_0", shape=(0, 1 << 60), size=0)
    with pytest.raises(ModelFileError, match="a dimension beyond"):
        TFCheckpoint(prefix)


@pytest.mark.parametrize("name", ["lm/softmax/W", "lm/softmax/b", "lm/char_embed", "lm/CNN/W_cnn_0"])
@pytest.mark.parametrize("dtype", ["int32", "uint32", "bool", "string"])
def test_every_imported_tensor_is_checked_for_floats(tmp_path, name, dtype):
    """The softmax's dtype was not checked: an int32 softmax was imported as garbage floats."""
    run = bilm_run(tmp_path)
    prefix = run / BILM_PREFIX
    entry = TFCheckpoint(prefix).entry(name)
    itemsize = {"int32": 4, "uint32": 4, "bool": 1, "string": None}[dtype]
    changes = {"dtype": DTYPE_CODES[dtype]}
    if itemsize == 1:
        changes["shape"] = entry.shape[:-1] + (entry.shape[-1] * 4,)
    rewrite_entry(prefix, name, **changes)
    out = tmp_path / "out"
    with pytest.raises(ModelFileError) as error:
        import_bilm_checkpoint(BilmCheckpoint(prefix, run / "options.json", None), out)
    assert f"{name!r} is {dtype}, expected floats" in one_line(error.value)
    assert not out.exists()


def _mutated_entry(rng: random.Random, entry) -> bytes:
    """One lie about a tensor: its dtype, shape, place or size (alone, or a shape and size that agree)."""
    big = [0, 1, 2, 7, 1 << 20, 1 << 31, 1 << 32, 1 << 40, 1 << 48, 1 << 49, 1 << 62, (1 << 63) - 1, 1 << 63, -1]
    kind = rng.randrange(8)
    if kind == 0:
        return entry_of(entry, dtype=rng.choice(sorted(DTYPE_CODES.values()) + [0, 11, 20, 21, 99, 1 << 40]))
    if kind == 1:
        shape = list(entry.shape)
        if shape and rng.random() < 0.7:
            shape[rng.randrange(len(shape))] = rng.choice(big)
        else:
            shape.append(rng.choice(big))
        return entry_of(entry, shape=shape)
    if kind == 2:
        return entry_of(entry, size=rng.choice(big + [entry.size + 1, entry.size - 1]))
    if kind == 3:
        return entry_of(entry, offset=rng.choice(big + [entry.offset + 4, 195_688 - entry.size + 1]))
    if kind == 4:
        return entry_of(entry, shard=rng.choice([1, 2, 99_999, 1 << 32, -1]))
    if kind == 5:  # a shape and a size that agree with each other, not with the data file
        shape = tuple(rng.choice([1, 3, 1 << 10, 1 << 20, 1 << 31, 1 << 40]) for _ in range(rng.randint(1, 4)))
        count = 1
        for dim in shape:
            count *= dim
        return entry_of(entry, shape=shape, size=4 * count, dtype=DTYPE_CODES["float32"])
    if kind == 6:
        return entry_of(entry, shape=entry.shape[::-1] if len(entry.shape) > 1 else (1, *entry.shape))
    value = bytearray(entry_of(entry))
    for _ in range(rng.randint(1, 4)):
        value[rng.randrange(len(value))] = rng.randrange(256)
    return bytes(value)


def _mutated_header(rng: random.Random) -> bytes:
    version = field_int(1, rng.choice([0, 1, 5])) + field_int(2, rng.choice([0, 1, 2, 1 << 40]))
    return (field_int(1, rng.choice([0, 1, 2, 100_000, 1 << 40, -1])) + field_int(2, rng.choice([0, 0, 1]))
            + field_bytes(3, version))


def test_fuzz_the_index_with_valid_checksums(tmp_path):
    """Seeded lies in the index's entries behind valid checksums: reading every tensor and importing the model
    each load or are refused in one line, never another exception."""
    run = bilm_run(tmp_path)
    prefix = run / BILM_PREFIX
    index = prefix.with_name(prefix.name + ".index")
    items = read_items(index)
    entries = {k: parse_entry(k.decode(), v, "") for k, v in items if k}
    rng = random.Random(66)
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(240):
        mutated = dict(items)
        for _ in range(rng.choice([1, 1, 2])):
            if rng.random() < 0.08:
                mutated[b""] = _mutated_header(rng)
            else:
                key = rng.choice(sorted(entries))
                mutated[key] = _mutated_entry(rng, entries[key])
        write_table(index, list(mutated.items()))
        for attempt in ("read", "import"):
            try:
                if attempt == "read":
                    ckpt = TFCheckpoint(prefix)
                    for name in ckpt.names():
                        ckpt.read(name)
                else:
                    import_bilm_checkpoint(BilmCheckpoint(prefix, run / "options.json", None), tmp_path / "out",
                                           overwrite=True)
                outcomes["loaded"] += 1
            except ElmoError as e:
                one_line(e)
                outcomes["refused"] += 1
            except Exception as e:
                pytest.fail(f"mutation {i} ({attempt}): {type(e).__name__}: {e}")
    assert outcomes["refused"] > 240 and outcomes["loaded"] > 0, outcomes


# ---- #66.4 nothing says "wrote" before what it wrote is known to load ---------------------------------------------

@pytest.mark.parametrize("change", [
    lambda o: o["lstm"].update(dim=32), lambda o: o["lstm"].update(projection_dim=16),
    lambda o: o["lstm"].update(n_layers=1), lambda o: o["char_cnn"].update(n_highway=1),
    lambda o: o["char_cnn"]["filters"].pop(), lambda o: o["char_cnn"]["embedding"].update(dim=8),
    lambda o: o["lstm"].pop("projection_dim"),
])
def test_import_with_options_of_another_model_writes_nothing(tmp_path, capsys, change):
    import json

    from elmo.cli import main

    run = bilm_run(tmp_path)
    options = json.loads((run / "options.json").read_text())
    change(options)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(options))
    out = tmp_path / "out"
    assert main(["import-tf", str(run), str(out), "--options", str(other)]) == 2
    err = capsys.readouterr()
    assert "wrote" not in err.out and not out.exists()
    assert "the options.json this checkpoint was trained with?" in one_line(err.err.strip())


def test_import_of_a_one_dimensional_char_embed_of_the_right_size_writes_nothing(tmp_path, capsys):
    from elmo.cli import main

    run = bilm_run(tmp_path)
    prefix = run / BILM_PREFIX
    rows, dim = TFCheckpoint(prefix).entry("lm/char_embed").shape
    rewrite_entry(prefix, "lm/char_embed", shape=(rows * dim,))
    assert main(["import-tf", str(run), str(tmp_path / "out")]) == 2
    err = capsys.readouterr()
    assert "'lm/char_embed' has shape [1044], the options call for [261, 4]" in err.err and "wrote" not in err.out
    assert not (tmp_path / "out").exists()


def test_an_import_that_would_not_load_leaves_nothing(tmp_path, monkeypatch):
    """The written folder is loaded as first use loads it before it is renamed into place."""
    import elmo.formats.weights

    run = bilm_run(tmp_path)

    def refuse(*args, **kwargs):
        raise ModelFileError("weights.hdf5: refused at load")

    monkeypatch.setattr(elmo.formats.weights, "load_bilm", refuse)
    with pytest.raises(ModelFileError, match="refused at load"):
        import_bilm_checkpoint(BilmCheckpoint(run / BILM_PREFIX, run / "options.json", None), tmp_path / "out")
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [run]


# ---- #66.3 other tools' files are read as those tools write them ---------------------------------------------------

def run_named(tmp_path: Path, prefix_name: str) -> Path:
    """A bilm-tf run whose checkpoint has another name, its `checkpoint` file written by the test."""
    run = bilm_run(tmp_path)
    for suffix in (".index", ".data-00000-of-00001"):
        (run / f"{BILM_PREFIX}{suffix}").rename(run / f"{prefix_name}{suffix}")
    return run


@pytest.mark.parametrize("name, written", [
    ("modèle.ckpt-120", r"mod\303\250le.ckpt-120"),  # what TensorFlow's text format writes: octal UTF-8
    ("modèle.ckpt-120", r"mod\xc3\xa8le.ckpt-120"),
    ("modèle.ckpt-120", "modèle.ckpt-120"),  # raw UTF-8 (text format's utf8 printing)
    ("run \"7\".ckpt", r"run \"7\".ckpt"),
    ("日本.ckpt", r"\346\227\245\346\234\254.ckpt"),
])
def test_checkpoint_names_are_unescaped_as_tensorflow_writes_them(tmp_path, name, written):
    from elmo.tf import latest_checkpoint

    run = run_named(tmp_path, name)
    (run / "checkpoint").write_text(f'model_checkpoint_path: "{written}"\nall_model_checkpoint_paths: "{written}"\n',
                                    encoding="utf-8")
    assert latest_checkpoint(run) == run / name


@pytest.mark.parametrize("written, needle", [
    (r"model\q.ckpt", r"the escape '\\q.c' is not one a text protobuf has"),
    (r"model\x.ckpt", "is not one a text protobuf has"),
    (r"model\777", "is not one a text protobuf has"),
    (r"mod\350le", "its escaped bytes are not UTF-8"),
    (r"model\000x", "does not name a checkpoint prefix"),
    ("", "does not name a checkpoint prefix"),
    ("/", "does not name a checkpoint prefix"),
])
def test_a_checkpoint_file_that_tensorflow_would_not_write_is_one_line(tmp_path, capsys, written, needle):
    from elmo.cli import main

    run = bilm_run(tmp_path)
    (run / "checkpoint").write_text(f'model_checkpoint_path: "{written}"\n', encoding="utf-8")
    with pytest.raises(ModelFileError) as error:
        from elmo.tf import latest_checkpoint
        latest_checkpoint(run)
    assert needle in one_line(error.value) and str(run / "checkpoint") in str(error.value)
    assert main(["import-tf", str(run), str(tmp_path / "out")]) == 2
    assert needle in capsys.readouterr().err


def test_a_checkpoint_file_that_is_not_utf8_is_one_line(tmp_path):
    from elmo.tf import latest_checkpoint

    run = bilm_run(tmp_path)
    (run / "checkpoint").write_bytes(b'model_checkpoint_path: "mod\xe8le"\n')
    with pytest.raises(ModelFileError, match="not UTF-8 text at byte 27"):
        latest_checkpoint(run)


# ---- #66.2 no arithmetic on a model's numbers ends in a traceback -------------------------------------------------

@pytest.fixture
def imported_lm(tmp_path):
    """The bilm-tf run imported with its training vocabulary: a model directory with its softmax."""
    from conftest import BILM_TF, need

    from elmo.cli import main

    out = tmp_path / "lm"
    assert main(["import-tf", str(TF_DATA / "bilm-run"), str(out), "--vocab", str(need(BILM_TF / "train" / "vocab.txt"))]) == 0
    return out


def scale_softmax(model_dir: Path, factor: float) -> None:
    import h5py

    with h5py.File(model_dir / "softmax.hdf5", "r+") as f:
        f["W"][...] = f["W"][...] * factor
        f["b"][...] = f["b"][...] * factor


@pytest.mark.parametrize("factor", [1e4, 1e30, -1e38])
@pytest.mark.parametrize("progress", [True, False])
def test_a_perplexity_beyond_float_range_is_printed(imported_lm, capsys, factor, progress):
    """Large finite softmax weights: math.exp in the progress line raised OverflowError; now inf (or nan) is a result."""
    from elmo.cli import main

    scale_softmax(imported_lm, factor)
    argv = ["perplexity", str(imported_lm), "--test", str(TF_DATA / "heldout.txt"), "--batch-size", "2"]
    assert main(argv + ([] if progress else ["--no-progress"])) == 0
    out = capsys.readouterr().out
    assert "average inf" in out or "average nan" in out
    assert main(argv + ["--json", "--no-progress"]) == 0
    assert '"average": null' in capsys.readouterr().out


def test_nothing_to_score_is_one_line(imported_lm, tmp_path, capsys):
    from elmo.cli import main

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["perplexity", str(imported_lm), "--test", str(empty)]) == 2
    assert "no sentences (the corpus is empty or only blank lines)" in capsys.readouterr().err
    assert main(["perplexity", str(imported_lm), "--test", str(TF_DATA / "heldout.txt"), "--bilm-tf-batches",
                 "--batch-size", "64"]) == 2
    assert "nothing to score (38 targets, fewer than one complete batch of 64)" in capsys.readouterr().err


# ---- #66.10 the TensorFlow side, smaller ---------------------------------------------------------------------------

def test_a_copied_run_reads_its_own_options_and_checkpoint(tmp_path, monkeypatch):
    """bilm-tf reads the options beside the folder it is given; the `checkpoint` file's absolute path (what the Saver
    writes) led to the original's options.json, which may have changed since."""
    import json

    from elmo.tf.bilm_import import find_bilm_checkpoint

    original = bilm_run(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    (copy / "checkpoint").write_text(f'model_checkpoint_path: "{original / BILM_PREFIX}"\n')
    options = json.loads((original / "options.json").read_text())
    options["lstm"]["dim"] = 99  # the original's options changed after the copy was made
    (original / "options.json").write_text(json.dumps(options))
    found = find_bilm_checkpoint(copy)
    assert found.options_file == copy / "options.json" and found.prefix == copy / BILM_PREFIX
    import_bilm_checkpoint(found, tmp_path / "out")
    (copy / f"{BILM_PREFIX}.index").unlink()  # the copy without its own checkpoint: the named one, as TensorFlow
    assert find_bilm_checkpoint(copy) == BilmCheckpoint(original / BILM_PREFIX, copy / "options.json", None)


@pytest.mark.parametrize("command", [["embed", "{in}", "{out}", "--model", "{ref}"],
                                     ["perplexity", "{ref}", "--test", "{in}"]])
@pytest.mark.parametrize("damage", ["no options", "run without options", "damaged index", "bad checkpoint file"])
def test_a_checkpoint_as_model_says_what_import_tf_says(tmp_path, capsys, monkeypatch, command, damage):
    from elmo.cli import main

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    run = bilm_run(tmp_path)
    ref = run / BILM_PREFIX
    if damage in ("no options", "run without options"):
        (run / "options.json").unlink()
        ref = run if damage == "run without options" else ref
    elif damage == "damaged index":
        (run / f"{BILM_PREFIX}.index").write_bytes(b"\0" * 100)
    else:
        (run / "checkpoint").write_text('model_checkpoint_path: "a\\qb"\n')
        ref = run
    assert main(["import-tf", str(ref), str(tmp_path / "out")]) == 2
    expected = capsys.readouterr().err.split(": error: ", 1)[1]
    words = [w.format(**{"in": TF_DATA / "heldout.txt", "out": tmp_path / "o.hdf5", "ref": ref}) for w in command]
    assert main(words) == 2
    assert capsys.readouterr().err.split(": error: ", 1)[1] == expected
    assert not (tmp_path / "cache").exists() or "cache" not in expected


def test_perplexity_errors_name_the_reference_not_the_cache(tmp_path, capsys, monkeypatch):
    from elmo.cli import main

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    run = bilm_run(tmp_path)
    assert main(["perplexity", str(run), "--test", str(TF_DATA / "heldout.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elmo perplexity: error: {run} (its model files in {tmp_path / 'cache'}")
    assert "no vocab.txt; give --vocab" in err
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<S>\n</S>\n<UNK>\nthe\n")
    assert main(["perplexity", str(run), "--test", str(TF_DATA / "heldout.txt"), "--vocab", str(vocab)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elmo perplexity: error: {run} (its model files in") and ": softmax.hdf5: W has shape" in err


def test_perplexity_says_which_tokens_it_scored(imported_lm, capsys):
    from elmo.cli import main

    heldout = str(TF_DATA / "heldout.txt")
    assert main(["perplexity", str(imported_lm), "--test", heldout, "--batch-size", "2", "--no-progress"]) == 0
    assert "(38 tokens: every target, stream mode)" in capsys.readouterr().out
    assert main(["perplexity", str(imported_lm), "--test", heldout, "--batch-size", "2", "--bilm-tf-batches",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    # rows: 10 + 15 targets (sentences 1 and 3), 13 (sentence 2), whose row then finds no sentence: 13 steps of 2
    assert "(26 of 38 targets: bilm-tf's complete batches" in out
    import json

    base = ["perplexity", str(imported_lm), "--test", heldout, "--batch-size", "1", "--no-progress", "--json"]
    assert main(base + ["--unroll-steps", "1"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert main(base + ["--bilm-tf-batches"]) == 0  # at batch 1 every batch is complete: the same figure
    complete = json.loads(capsys.readouterr().out)
    assert complete["average"] == pytest.approx(every["average"], rel=1e-9) and complete["tokens"] == 38


# ---- #66.5 a reference is refused by our parser before any library sees it ----------------------------------------

BAD_REFERENCES = [
    ("hf://owner/repo/../../x", "a '..' segment"),
    ("hf://owner/repo/./options.json", "a '.' segment"),
    ("hf://owner/repo/a/%2E%2E/b", "a '..' segment"),
    ("hf://owner/repo/a//b", "an empty segment"),
    ("hf://owner/repo/a/", "an empty segment"),
    ("hf://owner/repo@v1\x00x", "control character"),
    ("hf://owner/repo@v1%00x", "is not a branch, tag or commit name"),
    ("hf://owner/repo@..", "is not a branch, tag or commit name"),
    ("hf://owner/repo@a..b", "is not a branch, tag or commit name"),
    ("hf://owner/repo@a%2F%2Fb", "is not a branch, tag or commit name"),
    ("hf://owner/repo@a:b", "is not a branch, tag or commit name"),
    ("hf://owner/repo@%20", "is not a branch, tag or commit name"),
    ("hf://own\ner/repo", "control character"),
    ("hf://owner/re\x7fpo", "control character"),
    ("hf://../repo", "is not a Hub name"),
    ("hf://owner/..", "is not a Hub name"),
    ("hf://owner/re--po", "is not a Hub name"),
    ("hf://owner/-repo", "is not a Hub name"),
    ("hf://owner/rep%6F", "is not a Hub name"),
    ("hf://owner/sub%2F..%2F..", "is not a Hub name"),
    ("hf://owner/repo/sub/x%00y", "control character"),
    ("https://example.org/models/../secret/model.zip", "a '..' segment"),
    ("https://example.org/models/%2e%2e/model.zip", "a '..' segment"),
    ("https://example.org/models//model.zip", "an empty segment"),
    ("https://example.org/models/./model.zip", "a '.' segment"),
    ("https://example.org/m\x00odel.zip", "control character"),
    ("https://example.org/m%00odel.zip", "control character"),
    ("https://example.org/my model.zip", "a space in the URL"),
    ("https://[::1/model.zip", "not a URL"),
    ("https://example.org:port/model.zip", "not a URL"),
    ("https:///model.zip", "URL"),  # no host: not taken for a URL, refused as no model
]


@pytest.mark.parametrize("reference, needle", BAD_REFERENCES)
def test_a_malformed_reference_is_refused_by_our_parser(tmp_path, capsys, monkeypatch, reference, needle):
    """Refused in one line, control characters escaped, before huggingface_hub or requests see it."""
    pytest.importorskip("huggingface_hub")
    import huggingface_hub
    import requests

    from elmo.cli import main

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("reached huggingface_hub"))
    monkeypatch.setattr(requests.Session, "send", lambda *a, **k: pytest.fail("reached requests"))
    (tmp_path / "in.txt").write_text("a b\n")
    commands = [["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--model", reference]]
    if reference.startswith("https"):
        if "[" not in reference:  # elmo.models.download_reference splits it before our parser (reported in #66)
            commands.append(["download", reference])
    elif "\x00" not in reference:  # a NUL in --options is refused by elmo.files.fileio (#67's), not here
        commands.append(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--options",
                         reference + "/options.json", "--weights", reference + "/weights.hdf5"])
    for argv in commands:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1 and "\x00" not in err and "\x7f" not in err, err
    assert not (tmp_path / "cache").exists()


def test_the_hf_offline_message_names_every_file_in_one_command(tmp_path, monkeypatch):
    """#64 item 4: "and and"; the command's backticks closed before --revision; only options.json named."""
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    from elmo.errors import OfflineError
    from elmo.hub.huggingface import hf_file, hf_model_dir

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError) as error:
        hf_model_dir("hf://owner/models@v1.0/elmo/small")
    message = one_line(error.value)
    assert "and and" not in message
    assert ("(`hf download owner/models elmo/small/options.json elmo/small/weights.hdf5 --revision v1.0`) and copy "
            "HF_HOME here") in message
    with pytest.raises(OfflineError, match=r"\(`hf download owner/models a/vocab.txt`\)"):
        hf_file("hf://owner/models/a/vocab.txt")


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_bilm_tf_batches_give_bilm_tf_run_test_figure(imported_lm, batch_size):
    """bilm-tf's own test() at batch sizes 1-3 (scripts/bilm_tf_batches.py, TensorFlow 2.21): the same targets and
    perplexity; every-target scoring differs from it once batches are incomplete (26 or 30 of 38 targets)."""
    import json

    from elmo.training.perplexity import load_for_scoring, perplexity

    figure = json.loads((TF_DATA / "bilm-tf-batches.json").read_text())[str(batch_size)]
    model, vocab = load_for_scoring(imported_lm)
    got = perplexity(model, vocab, str(TF_DATA / "heldout.txt"), batch_size=batch_size, complete_batches=True)
    assert got["tokens"] == figure["targets"] and got["targets"] == 38
    assert got["average"] == pytest.approx(figure["perplexity"], rel=1e-5)  # float32 sums there, float64 here
    every = perplexity(model, vocab, str(TF_DATA / "heldout.txt"), batch_size=batch_size)
    assert every["tokens"] == 38 and (batch_size == 1) == (every["average"] == pytest.approx(figure["perplexity"], rel=1e-5))


# ---- #66.7 a resumed run refuses every flag that would change it --------------------------------------------------

@pytest.fixture(scope="module")
def micro_run_66(tmp_path_factory):
    from conftest import train_micro_run

    root = tmp_path_factory.mktemp("micro66")
    run, flags = train_micro_run(root, steps=2)
    return root, run, flags


def _resume(run: Path, *flags: str) -> list[str]:
    return ["train", "--out", str(run), "--resume", "--max-steps", "3", "--threads", "1", "--no-progress", *flags]


def test_resume_with_the_flags_the_run_started_with_goes_on(micro_run_66, tmp_path, one_thread):
    from elmo.cli import main

    _, run, flags = micro_run_66
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert main(["train", *flags, "--out", str(copy), "--resume", "--max-steps", "3"]) == 0


def _changed(root: Path, tmp_path: Path, what: str) -> list[str]:
    import json

    if what == "--init-from":
        return ["--init-from", str(root / "run")]
    if what == "--vocab":
        words = (root / "vocab.txt").read_text().splitlines()
        (tmp_path / "v.txt").write_text("\n".join(words[:-1]) + "\n")
        return ["--vocab", str(tmp_path / "v.txt")]
    options = json.loads((root / "micro.json").read_text())
    if what == "--options lstm":
        options["lstm"]["dim"] *= 2
    elif what == "--options batch_size":
        options["batch_size"] = 7
    else:
        return ["--preset", "small"]
    (tmp_path / "o.json").write_text(json.dumps(options))
    return ["--options", str(tmp_path / "o.json")]


@pytest.mark.parametrize("what, needle", [
    ("--init-from", "was started from fresh weights, without --init-from"),
    ("--vocab", "not the vocabulary the run in"),
    ("--options lstm", "--options/--preset: lstm differs from the run in"),
    ("--options batch_size", "--options/--preset: batch_size differs from the run in"),
    ("--preset", "--options/--preset: char_cnn differs from the run in"),
])
def test_resume_refuses_a_different_start(micro_run_66, tmp_path, capsys, one_thread, what, needle):
    from elmo.cli import main

    root, run, _ = micro_run_66
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = sorted(p.name for p in (copy / "checkpoints").iterdir())
    assert main(_resume(copy, *_changed(root, tmp_path, what))) == 2
    err = capsys.readouterr().err
    assert needle in one_line(err.strip()) and "a resumed run keeps its settings" in err
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == before


def test_resume_of_a_fine_tune_compares_its_start_model(micro_run_66, tmp_path, capsys, one_thread, monkeypatch):
    import json

    from elmo.cli import main

    root, run, _ = micro_run_66
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    record = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps(dict(record, init_from=str(root / "start-model"))))
    (root / "start-model").mkdir(exist_ok=True)
    assert main(_resume(copy, "--init-from", "default")) == 2
    assert f"--init-from default: the run in {copy} was started from {root / 'start-model'}" in capsys.readouterr().err
    monkeypatch.chdir(root)
    assert main(_resume(copy, "--init-from", "start-model")) == 0  # the same folder, named relative to here


@pytest.mark.parametrize("flag, started", [("--full-softmax", "--sampled-softmax"),
                                           ("--no-first-layer-dropout", "first_layer_dropout=True"),
                                           ("--batch-size=9", "4")])
def test_resume_names_the_setting_the_run_started_with(micro_run_66, tmp_path, capsys, one_thread, flag, started):
    from elmo.cli import main

    _, run, _ = micro_run_66
    assert main(_resume(run, flag)) == 2
    assert f"was started with {started}; a resumed run keeps its settings" in capsys.readouterr().err


# ---- #66.8 the cache does not grow without bound -------------------------------------------------------------------

def model_zip(path: Path, allennlp_dir: Path, extra: list[tuple[str, bytes]] = (), options: dict | None = None) -> Path:
    """A zip of the AllenNLP fixture model (options.json + weights.hdf5 under m/), with `extra` members."""
    import json
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("m/options.json", json.dumps(options) if options else (allennlp_dir / "options.json").read_text())
        z.write(allennlp_dir / "lm_weights.hdf5", "m/weights.hdf5")
        for name, data in extra:
            z.writestr(name, data)
    return path


def cache_leftovers(cache: Path) -> list[str]:
    """Every unpacked file left under the cache (records, locks and downloads aside)."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file() and "extract" in str(p))


@pytest.fixture
def bomb(tmp_path, allennlp_dir):
    """A 100 MB member of zeros beside the fixture model: about 100 KB zipped, far past what its architecture needs."""
    return model_zip(tmp_path / "bomb.zip", allennlp_dir, [("m/README.txt", bytes(100 << 20))])


def test_a_zip_that_inflates_past_its_model_is_refused_as_it_unpacks(bomb, tmp_path, capsys, monkeypatch):
    from elmo.cli import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    assert bomb.stat().st_size < 1 << 20
    (tmp_path / "in.txt").write_text("a b\n")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--model", str(bomb)]) == 2
    err = capsys.readouterr().err
    assert "bomb.zip: unpacks to more than" in one_line(err.strip()) and cache_leftovers(cache) == []


def test_a_url_archive_that_inflates_past_its_model_is_refused(bomb, hub_env):  # noqa: F811 (the fixture)
    from hub_server import serve

    from elmo.hub.published import fetch_model_url

    with serve({"/bomb.zip": bomb.read_bytes()}) as server, pytest.raises(ModelFileError, match="unpacks to more than"):
        fetch_model_url(server.url("/bomb.zip"))
    assert cache_leftovers(hub_env / "elmo-cache") == []


def test_the_budget_is_what_the_declared_architecture_needs(tmp_path, allennlp_dir):
    """The fixture model unpacks within its budget; its options claiming a far larger model raise the budget only
    to what that model would take, and options that are no model are refused before anything is unpacked."""
    import json
    import zipfile

    from elmo.hub.archives import MAX_BYTES, _Member, model_budget
    from elmo.model.options import read_options

    options = json.loads((allennlp_dir / "options.json").read_text())

    def budget(opts) -> int:
        data = json.dumps(opts).encode()
        member = _Member("m/options.json", len(data), False, True, lambda: __import__("io").BytesIO(data))
        return model_budget(tmp_path / "x.zip", [member])

    params = read_options(allennlp_dir / "options.json").parameter_count()
    assert budget(options) == params * 8 + (16 << 20) + (64 << 20)
    options["lstm"]["dim"] *= 4
    assert budget(options) > params * 8 + (80 << 20)
    options["lstm"]["dim"] = 2**31 - 1  # a valid but absurd architecture: the general ceiling still holds
    archive = model_zip(tmp_path / "huge.zip", allennlp_dir, options=options)
    assert budget(options) > MAX_BYTES
    with pytest.raises(ModelFileError, match="does not load"):
        from elmo.hub.archives import check_model_loads, extract_archive

        check_model_loads(extract_archive(archive, tmp_path / "out", budget=model_budget) / "m", str(archive))
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as z:
        z.writestr("m/options.json", b"{\"lstm\": 5}")
        z.writestr("m/weights.hdf5", b"x")
    with pytest.raises(ModelFileError, match=r"member 'm/options\.json'"):
        extract_archive(tmp_path / "bad.zip", tmp_path / "out2", budget=model_budget)
    assert not (tmp_path / "out2").exists()


def test_a_model_that_does_not_load_leaves_no_unpacked_copy(tmp_path, allennlp_dir, capsys, monkeypatch):
    import json

    from elmo.cli import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    options = json.loads((allennlp_dir / "options.json").read_text())
    options["lstm"]["projection_dim"] *= 2  # the options of another model
    archive = model_zip(tmp_path / "other.zip", allennlp_dir, options=options)
    (tmp_path / "in.txt").write_text("a b\n")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--model", str(archive)]) == 2
    assert "other.zip: the model in the archive does not load" in capsys.readouterr().err
    assert cache_leftovers(cache) == []


def test_a_touched_zip_keeps_one_copy_and_a_changed_one_replaces_it(tmp_path, allennlp_dir, monkeypatch):
    import os
    import zipfile

    from elmo.hub.nlpl_zip import unpacked_zip

    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    archive = model_zip(tmp_path / "model.zip", allennlp_dir)
    first = unpacked_zip(archive)
    unpacked_at = (first / "weights.hdf5").stat().st_mtime_ns
    for i in range(3):
        os.utime(archive, ns=(10**9 * (i + 1), 10**9 * (i + 1)))  # touched: the same bytes
        assert unpacked_zip(archive) == first and (first / "weights.hdf5").stat().st_mtime_ns == unpacked_at
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("m/NOTES.txt", "changed")
    again = unpacked_zip(archive)
    assert (again / "NOTES.txt").is_file() and again == first
    assert len(list((cache / "local").iterdir())) == 1 and not list((cache / "local").rglob(".replaced-*"))


@pytest.mark.parametrize("names", [["m/options.json", "m/options.json"], ["m/options.json", "m/./options.json"],
                                   ["m/weights.hdf5", "m//weights.hdf5"]])
@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_duplicate_member_names_are_refused(tmp_path, allennlp_dir, names, kind):
    import io
    import tarfile
    import warnings
    import zipfile

    from elmo.hub.archives import extract_archive

    archive = tmp_path / f"dup.{'zip' if kind == 'zip' else 'tar.gz'}"
    contents = [(allennlp_dir / "options.json").read_bytes(), b"{}"]
    if kind == "zip":
        with warnings.catch_warnings(), zipfile.ZipFile(archive, "w") as z:
            warnings.simplefilter("ignore")  # zipfile warns of the duplicate name, and writes it
            for name, data in zip(names, contents):
                z.writestr(name, data)
    else:
        with tarfile.open(archive, "w:gz") as t:
            for name, data in zip(names, contents):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    with pytest.raises(ModelFileError, match="have one name; which is the model's"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- #66.9 the API checks every argument, everywhere ---------------------------------------------------------------

@pytest.fixture(scope="module")
def fixture_elmo(allennlp_dir):
    import elmo

    return elmo.Elmo(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", 1, dropout=0.0)


@pytest.mark.parametrize("make, needle", [
    (lambda ids: ids.to(__import__("torch").uint8), "found torch.uint8"),
    (lambda ids: ids.to(__import__("torch").int16), "found torch.int16"),
    (lambda ids: ids.bool(), "found torch.bool"),
    (lambda ids: ids[:0], "inputs hold no sentences (shape (0, 3, 50))"),
    (lambda ids: ids[None, :0], "inputs hold no sentences (shape (1, 0, 3, 50))"),
    (lambda ids: ids[0], "inputs must have shape (batch, tokens, 50)"),
])
def test_elmo_refuses_char_ids_of_the_wrong_dtype_or_an_empty_batch(fixture_elmo, make, needle):
    import elmo

    ids = elmo.batch_to_ids([["a", "b", "c"], ["d"]])
    with pytest.raises(elmo.errors.InputError) as error:
        fixture_elmo(make(ids))
    assert needle in one_line(error.value)
    assert fixture_elmo(ids.int())["elmo_representations"][0].shape == (2, 3, 32)  # int32 ids are ids too


@pytest.mark.parametrize("word_inputs, needle", [
    (lambda ids: ids[..., 0].float(), "word_inputs must be an int64 tensor"),
    (lambda ids: [[1, 2, 3]], "found list"),
    (lambda ids: ids[0, :, 0], "word_inputs must hold one id per token"),
])
def test_elmo_refuses_word_ids_of_the_wrong_type_or_rank(allennlp_dir, word_inputs, needle):
    """Where the ids are used: a model with a vocabulary cache (without one they are ignored, as AllenNLP does:
    test_allennlp_compat.py::test_word_ids_without_a_cache_are_ignored_and_checked_where_used)."""
    import elmo

    cached = elmo.Elmo(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", 1, dropout=0.0,
                       vocab_to_cache=["@@PADDING@@", "a", "b"])
    ids = elmo.batch_to_ids([["a", "b", "c"]])
    with pytest.raises(elmo.errors.InputError, match=needle):
        cached(ids, word_inputs=word_inputs(ids))


@pytest.mark.parametrize("change, needle", [
    (lambda sd, k: {**sd, k: sd[k].tolist()}, "must be a tensor, found list"),
    (lambda sd, k: {**sd, k: sd[k].numpy()}, "must be a tensor, found ndarray"),
    (lambda sd, k: {**sd, k: None}, "must be a tensor, found NoneType"),
    (lambda sd, k: {**sd, k: sd[k].long()}, "holds torch.int64; this module's weights are floats"),
    (lambda sd, k: {**sd, 5: sd[k]}, "keys must be parameter names (str), found int 5"),
    (lambda sd, k: list(sd.items()), "state_dict must be a mapping"),
])
def test_load_state_dict_refuses_values_of_the_wrong_type(fixture_elmo, change, needle):
    import torch

    import elmo

    state = {k: v.clone() for k, v in fixture_elmo.state_dict().items()}
    key = next(iter(state))
    with pytest.raises(elmo.errors.InputError) as error:
        fixture_elmo.load_state_dict(change(state, key))
    assert needle in one_line(error.value)
    assert all(torch.equal(v, state[k]) for k, v in fixture_elmo.state_dict().items())  # nothing was loaded


def test_the_0_9_embedder_and_simple_elmo_name_a_bad_batch(allennlp_dir, tmp_path):
    import elmo
    from elmo.allennlp.elmo_embedder import ElmoEmbedder
    from elmo.simple_elmo import ElmoModel

    embedder = ElmoEmbedder(str(allennlp_dir / "options.json"), str(allennlp_dir / "lm_weights.hdf5"))
    assert embedder.embed_batch([]) == []
    with pytest.raises(elmo.errors.InputError, match="batch holds no sentences"):
        embedder.batch_to_embeddings([])
    with pytest.raises(elmo.errors.InputError, match="sentence 1 must be a list of token strings, found NoneType"):
        embedder.batch_to_embeddings([["a"], None])
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(allennlp_dir / "options.json", folder / "options.json")
    shutil.copy(allennlp_dir / "lm_weights.hdf5", folder / "weights.hdf5")
    model = ElmoModel()
    model.load(str(folder), max_batch_size=4)
    for texts, needle in [([["a"], None], r"texts\[1\] is NoneType"), ([["a", 3]], r"texts\[0\] holds a token"),
                          (5, "found int"), ([["a"], 7], r"texts\[1\] is int")]:
        with pytest.raises(elmo.errors.InputError, match=needle):
            model.get_elmo_vectors(texts)
    assert model.get_elmo_vectors((w for w in s) for s in [["a", "b"]]).shape == (1, 2, 32)


def _with_compression_method(data: bytes, member: str, method: int) -> bytes:
    """The zip `data` with `member`'s compression method field changed, in its local and central headers."""
    import io
    import struct
    import zipfile

    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = z.getinfo(member)
    struct.pack_into("<H", out, info.header_offset + 8, method)
    at = out.find(b"PK\x01\x02")
    while at != -1:
        length = struct.unpack_from("<H", out, at + 28)[0]
        if out[at + 46:at + 46 + length] == member.encode():
            struct.pack_into("<H", out, at + 10, method)
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


@pytest.mark.parametrize("member", ["m/options.json", "m/weights.hdf5"])
@pytest.mark.parametrize("method", [9, 99])  # Deflate64, and a number no zip tool uses
def test_an_archive_member_with_an_unsupported_compression_method_is_one_line(
        hub_env, tmp_path, capsys, allennlp_dir, member, method):  # noqa: F811 (the fixture)
    from hub_server import serve

    from elmo.cli import main

    data = _with_compression_method(model_zip(tmp_path / "m.zip", allennlp_dir).read_bytes(), member, method)
    (tmp_path / "bad.zip").write_bytes(data)
    (tmp_path / "in.txt").write_text("a b\n")
    with serve({"/m.zip": data}) as server:
        for reference in (server.url("/m.zip"), str(tmp_path / "bad.zip")):
            assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--model", reference]) == 2
            err = capsys.readouterr().err
            assert "compression method is not supported" in one_line(err.strip()), err
        assert main(["download", server.url("/m.zip")]) == 2
        assert "compression method is not supported" in capsys.readouterr().err


@pytest.mark.parametrize("call, needle", [
    (lambda e: list(e.embed_sentences(None)), "sentences must be an iterable of tokenized sentences"),
    (lambda e: list(e.embed_sentences(5)), "found int"),
    (lambda e: list(e.embed_sentences("a b")), "found str 'a b'"),
    (lambda e: list(e.embed_sentences([["a"]], layers=7)), "layers must be one of"),
    (lambda e: list(e.embed_sentences([["a"]], layers=None)), "found None"),
])
def test_the_embedder_names_sentences_and_layers_that_are_not_lists(allennlp_dir, call, needle):
    import elmo

    embedder = elmo.Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    with pytest.raises(elmo.errors.InputError, match=needle):
        call(embedder)


def test_66_nul_in_a_path_argument_is_one_line():
    """#66: a NUL in a path given to a command's output check (`os.path.realpath` raised a bare ValueError)."""
    from elmo.files.output_paths import check_not_input

    with pytest.raises(InputError, match=r"--options: 'a\\x00b' holds a NUL character"):
        check_not_input("out.hdf5", {"--options": "a\x00b"})
    with pytest.raises(InputError, match="OUTPUT: .* holds a NUL character"):
        check_not_input("o\x00ut.hdf5", {"--options": "in.txt"})
