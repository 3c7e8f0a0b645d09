"""Faults an adversarial user can cause (issue #28): each is one clear line, exit 2, nothing left at OUTPUT."""

import errno
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import BILM_TF, MICRO_RUN, model_flags, need, subprocess_env

from elmo import ElmoEmbedder, Embedder
from elmo.cli import main as cli_main
from elmo.embed.corpus import Ranks
from elmo.errors import ElmoError, InputError, ModelFileError
from elmo.files.fileio import GuardedFile
from elmo.model.options import read_options

REPO = Path(__file__).resolve().parents[1]


def one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def corpus(tmp_path, fixture_sentences):
    """100 lines of the fixture sentences: about 0.3 MB of vectors with the test model."""
    lines = [s for lst in fixture_sentences for s in lst] * 4
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines[:100]) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def small_disk(tmp_path):
    """A 128 KB tmpfs: a real full disk (needs root; skips otherwise)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip() or 'not root'})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


# ---- fault 1: a full disk ---------------------------------------------------------------------------------------


def test_full_disk_is_refused_before_embedding(small_disk, corpus, allennlp_dir, capsys):
    assert cli_main(["embed", str(corpus), str(small_disk / "out.hdf5"), *model_flags(allennlp_dir)]) == 2
    one_line_error(capsys, "needs at least", "MB free beside it", "are free")
    assert os.listdir(small_disk) == []


def test_disk_filling_up_while_writing_exits_2_without_a_segfault(small_disk, corpus, allennlp_dir):
    """The up-front check bypassed, HDF5 meets ENOSPC for real: HDF5 alone would segfault (exit 139)."""
    script = ("import sys, elmo.embed.corpus as p; p.check_free_space = lambda *a: None; "
              "from elmo.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", script, "embed", str(corpus), str(small_disk / "out.hdf5"),
                           *model_flags(allennlp_dir)], capture_output=True, text=True, env=subprocess_env())
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "Traceback" not in done.stderr
    assert os.listdir(small_disk) == []  # no .tmp, no empty OUTPUT.parts/


def test_failed_write_in_the_join_keeps_the_parts_for_resume(tmp_path, corpus, allennlp_dir, capsys,
                                                                    monkeypatch):
    """Simulated ENOSPC (no root needed): the first write to the joined file fails."""
    out = tmp_path / "out.hdf5"
    real_write = GuardedFile._write

    def full_for_output(self, data):
        if self.name_for_errors == str(out):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, data)

    monkeypatch.setattr(GuardedFile, "_write", full_for_output)
    assert cli_main(["embed", str(corpus), str(out), *model_flags(allennlp_dir), "--part-lines", "40"]) == 2
    one_line_error(capsys, f"{out}: cannot write (No space left on device")
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "out.hdf5.parts"]
    assert len(os.listdir(tmp_path / "out.hdf5.parts")) == 3  # finished parts, no temporary file
    monkeypatch.setattr(GuardedFile, "_write", real_write)
    assert cli_main(["embed", str(corpus), str(out), *model_flags(allennlp_dir), "--part-lines", "40", "--resume"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "out.hdf5"]


RANK0_FAILS = """
import sys
from elmo.embed.corpus import Ranks
from elmo.errors import ElmoError
ranks = Ranks.from_env()
def make():
    raise PermissionError(13, "Permission denied", "/data/out.hdf5.parts")
try:
    ranks.from_rank0(make)
except ElmoError as e:
    print(f"rank {ranks.rank}: {e}", file=sys.stderr)
    sys.exit(3)
finally:
    ranks.close()
"""


@pytest.mark.slow  # torchrun
def test_two_real_ranks_stop_when_rank0_fails(tmp_path):
    script = tmp_path / "rank0_fails.py"
    script.write_text(RANK0_FAILS)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    done = subprocess.run(cmd, env=subprocess_env(), timeout=120, capture_output=True, text=True)  # not gloo's 72 hours
    assert done.returncode != 0
    assert "PermissionError: [Errno 13] Permission denied: '/data/out.hdf5.parts'" in done.stderr  # rank 0's own
    assert "rank 1: rank 0 failed: PermissionError: [Errno 13]" in done.stderr


def _h5_equal(a, b):
    import h5py
    import numpy as np
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        assert set(fa) == set(fb)
        for key in fa:
            assert np.array_equal(fa[key][()], fb[key][()])


def test_join_with_less_room_than_the_output_removes_each_part_once_copied(small_disk, corpus, allennlp_dir,
                                                                                    capsys, tmp_path):
    """Parts ~1.0 MB, OUTPUT ~1.0 MB, 1.7 MB of disk: the join fits only by consuming the parts."""
    subprocess.run(["mount", "-o", "remount,size=1700k", str(small_disk)], check=True)
    reference = tmp_path / "reference.hdf5"
    flags = [*model_flags(allennlp_dir), "--part-lines", "40"]
    assert cli_main(["embed", str(corpus), str(reference), *flags]) == 0
    capsys.readouterr()
    out = small_disk / "out.hdf5"
    assert cli_main(["embed", str(corpus), str(out), *flags]) == 0
    assert "each part is removed once it is copied" in capsys.readouterr().err
    assert os.listdir(small_disk) == ["out.hdf5"]
    _h5_equal(out, reference)


def test_consuming_join_without_root(tmp_path, corpus, allennlp_dir, capsys, monkeypatch):
    """The same decision with a simulated disk: plenty of room to embed, 0.6 MB left for the join."""
    import elmo.embed.corpus as ep
    real = shutil.disk_usage
    calls = []

    def usage(path):
        calls.append(path)
        return real(path)._replace(free=10**10 if len(calls) == 1 else 600_000)

    reference, out = tmp_path / "reference.hdf5", tmp_path / "out.hdf5"
    flags = [*model_flags(allennlp_dir), "--part-lines", "40"]
    assert cli_main(["embed", str(corpus), str(reference), *flags]) == 0
    monkeypatch.setattr(ep.shutil, "disk_usage", usage)
    capsys.readouterr()
    assert cli_main(["embed", str(corpus), str(out), *flags]) == 0
    assert "each part is removed once it is copied" in capsys.readouterr().err
    assert not (tmp_path / "out.hdf5.parts").exists()
    _h5_equal(out, reference)


# ---- faults 2 and 6: options.json that no model can use --------------------------------------------------------


def _options_with(allennlp_dir, tmp_path, **lstm):
    options = json.loads((allennlp_dir / "options.json").read_text())
    options["lstm"].update(lstm)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))  # NaN and Infinity as Python's json writes them
    return path


@pytest.mark.parametrize("key, value", [("cell_clip", math.nan), ("proj_clip", math.nan), ("cell_clip", math.inf)])
def test_nan_or_infinite_clip_is_refused(tmp_path, corpus, allennlp_dir, capsys, key, value):
    options = _options_with(allennlp_dir, tmp_path, **{key: value})
    args = ["embed", str(corpus), str(tmp_path / "o.hdf5"), "--options", str(options),
            "--weights", str(allennlp_dir / "lm_weights.hdf5")]
    assert cli_main(args) == 2
    one_line_error(capsys, f"'lstm.{key}' must be a finite non-negative number or null, found {value}")
    with pytest.raises(ModelFileError, match=f"lstm.{key}"):
        read_options(options)
    assert not (tmp_path / "o.hdf5").exists() and not (tmp_path / "o.hdf5.parts").exists()


def test_an_architecture_bigger_than_memory_is_a_check_not_an_allocation(tmp_path, corpus, allennlp_dir,
                                                                                capsys):
    options = _options_with(allennlp_dir, tmp_path, dim=2_000_000_000)
    args = ["embed", str(corpus), str(tmp_path / "o.hdf5"), "--options", str(options),
            "--weights", str(allennlp_dir / "lm_weights.hdf5")]
    assert cli_main(args) == 2
    one_line_error(capsys, "parameters (", "GiB as float32), more than this machine's", "lstm.dim 2000000000")
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "options.json"]


# ---- fault 3: batch sizes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_batch_size_must_be_positive_everywhere(allennlp_dir, embedder, tmp_path, corpus, size):
    message = f"batch_size must be a positive integer, found {size!r}"
    with pytest.raises(InputError, match=re.escape(message)):
        Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", batch_size=size)
    with pytest.raises(InputError, match=re.escape(message)):
        embedder.embed_sentences([["a", "b"]], batch_size=size)
    legacy = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    with pytest.raises(InputError, match=re.escape(message)):
        legacy.embed_sentences([["a", "b"]], batch_size=size)
    with pytest.raises(InputError, match=re.escape(message)):
        legacy.embed_file(str(corpus), tmp_path / "o.hdf5", batch_size=size)
    assert not (tmp_path / "o.hdf5").exists()


# ---- fault 5: devices -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["foo", "meta", "cuda:99" if torch.cuda.is_available() else "cuda"])
def test_unknown_device_is_one_line(tmp_path, corpus, allennlp_dir, capsys, device):
    assert cli_main(["embed", str(corpus), str(tmp_path / "o.hdf5"), *model_flags(allennlp_dir),
                     "--device", device]) == 2
    one_line_error(capsys, f"--device {device}")
    with pytest.raises(InputError, match="device"):
        Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", device=device)
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]


@pytest.mark.parametrize("command", [
    ["perplexity", "default", "--test", str(REPO / "examples" / "sentences.txt")],
    ["task", "train", "ner", "--train", "t", "--dev", "d", "--test", "e", "--model", "none"],
    ["train", "--train", "t", "--vocab", "v", "--out", "o"],
])
def test_every_command_checks_its_device(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli_main([*command, "--device", "meta"]) == 2
    one_line_error(capsys, "--device meta: expected cpu, cuda or cuda:N")

# ---- faults 7 and 8: INPUT that is a pipe, OUTPUT that is INPUT --------------------------------------------------


def test_a_pipe_as_input_is_refused_before_any_work(tmp_path, allennlp_dir, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it would block: the check must not open it
    assert cli_main(["embed", str(fifo), str(tmp_path / "o.hdf5"), *model_flags(allennlp_dir)]) == 2
    one_line_error(capsys, f"{fifo}: not a regular file", "save it to a file first")
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


@pytest.mark.slow  # a second interpreter; the FIFO test above checks the same in process
def test_stdin_from_a_pipe_is_refused(tmp_path, corpus, allennlp_dir):
    with subprocess.Popen(["cat", str(corpus)], stdout=subprocess.PIPE) as cat:
        done = subprocess.run([sys.executable, "-m", "elmo", "embed", "/dev/stdin", str(tmp_path / "o.hdf5"),
                               *model_flags(allennlp_dir)], stdin=cat.stdout, capture_output=True, text=True,
                              env=subprocess_env())
    assert done.returncode == 2 and "not a regular file" in done.stderr and "Traceback" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]


def test_output_that_is_the_input_is_refused_even_with_overwrite(tmp_path, corpus, allennlp_dir, capsys):
    before = corpus.read_bytes()
    assert cli_main(["embed", str(corpus), str(corpus), *model_flags(allennlp_dir), "--overwrite"]) == 2
    one_line_error(capsys, f"{corpus}: is INPUT itself")
    link = tmp_path / "link.txt"
    os.link(corpus, link)  # the same file under another name
    assert cli_main(["embed", str(corpus), str(link), *model_flags(allennlp_dir), "--overwrite", "--stateful"]) == 2
    one_line_error(capsys, "is INPUT itself")
    assert corpus.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["corpus.txt", "link.txt"]


# ---- fault 9: a fresh run in a dead run's folder ----------------------------------------------------------------


def test_fresh_run_in_a_dead_runs_out_starts_its_own_metrics(tmp_path):
    data = need(BILM_TF / "train" / "data.txt")
    vocab, options, run = tmp_path / "vocab.txt", tmp_path / "micro.json", tmp_path / "run"
    assert cli_main(["vocab", str(data), "-o", str(vocab)]) == 0
    options.write_text(json.dumps(MICRO_RUN))
    flags = ["train", "--train", str(data), "--vocab", str(vocab), "--options", str(options), "--batch-size", "4",
             "--unroll-steps", "4", "--negatives", "8", "--threads", "1", "--no-progress", "--max-steps", "2",
             "--log-every", "1", "--out", str(run)]
    assert cli_main(flags) == 0
    shutil.rmtree(run / "checkpoints")  # as if it had died before its first checkpoint
    assert cli_main(flags) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert steps == sorted(set(steps)) and steps[0] == 1


# ---- fault 10: any error on rank 0 reaches the other ranks -------------------------------------------------------


def test_any_error_on_rank0_is_sent_to_the_other_ranks(monkeypatch):
    sent = []
    monkeypatch.setattr(dist, "broadcast_object_list", lambda box, src: sent.append(list(box)))

    def make():
        raise PermissionError(13, "Permission denied", "/data/out.hdf5.parts")

    with pytest.raises(PermissionError):
        Ranks(rank=0, world=2).from_rank0(make)
    assert len(sent) == 1 and sent[0][0][0] is False
    forwarded = sent[0][0][1]
    assert isinstance(forwarded, ElmoError)
    assert str(forwarded) == "rank 0 failed: PermissionError: [Errno 13] Permission denied: '/data/out.hdf5.parts'"

    def receive(box, src):  # rank 1 gets what rank 0 sent
        box[0] = sent[0][0]

    monkeypatch.setattr(dist, "broadcast_object_list", receive)
    with pytest.raises(ElmoError, match="rank 0 failed: PermissionError"):
        Ranks(rank=1, world=2).from_rank0(make)


def test_atomic_writes_get_the_usual_mode_without_touching_the_umask(tmp_path, monkeypatch):
    """fileio makes its temporary file and folder with 0666/0777 less the umask, and never sets the umask
    (process-wide, so not thread-safe) to learn it."""
    from elmo.files.fileio import atomic_dir, atomic_path

    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", lambda *a: pytest.fail("fileio set the umask"))
        with atomic_path(tmp_path / "f.txt") as tmp:
            Path(tmp).write_text("x")
        with atomic_dir(tmp_path / "d") as tmp:
            Path(tmp, "inside").write_text("y")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f.txt"]
