"""Faults an adversarial user can cause (issue #28): each is one clear line, exit 2, nothing left at OUTPUT."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elmo.cli import main as cli_main
from elmo.fileio import GuardedFile

REPO = Path(__file__).resolve().parents[1]


def model_args(d):
    return ["--options", str(d / "options.json"), "--weights", str(d / "lm_weights.hdf5")]


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


def test_fault1_full_disk_is_refused_before_embedding(small_disk, corpus, allennlp_dir, capsys):
    assert cli_main(["embed", str(corpus), str(small_disk / "out.hdf5"), *model_args(allennlp_dir)]) == 2
    one_line_error(capsys, "needs at least", "MB free beside it", "are free")
    assert os.listdir(small_disk) == []


def test_fault1_disk_filling_up_while_writing_exits_2_without_a_segfault(small_disk, corpus, allennlp_dir):
    """The up-front check bypassed, HDF5 meets ENOSPC for real: HDF5 alone would segfault (exit 139)."""
    script = ("import sys, elmo.embed_parallel as p; p.check_free_space = lambda *a: None; "
              "from elmo.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", script, "embed", str(corpus), str(small_disk / "out.hdf5"),
                           *model_args(allennlp_dir)], capture_output=True, text=True, env=_env())
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "Traceback" not in done.stderr
    assert os.listdir(small_disk) == []  # no .tmp, no empty OUTPUT.parts/


def test_fault1_failed_write_in_the_join_keeps_the_parts_for_resume(tmp_path, corpus, allennlp_dir, capsys,
                                                                    monkeypatch):
    """Simulated ENOSPC (no root needed): the first write to the joined file fails."""
    out = tmp_path / "out.hdf5"
    real_write = GuardedFile._write

    def full_for_output(self, data):
        if self.name_for_errors == str(out):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, data)

    monkeypatch.setattr(GuardedFile, "_write", full_for_output)
    assert cli_main(["embed", str(corpus), str(out), *model_args(allennlp_dir), "--part-lines", "40"]) == 2
    one_line_error(capsys, f"{out}: cannot write (No space left on device")
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "out.hdf5.parts"]
    assert len(os.listdir(tmp_path / "out.hdf5.parts")) == 3  # finished parts, no temporary file
    monkeypatch.setattr(GuardedFile, "_write", real_write)
    assert cli_main(["embed", str(corpus), str(out), *model_args(allennlp_dir), "--part-lines", "40", "--resume"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "out.hdf5"]


def _env():
    return dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                OMP_NUM_THREADS="1")
