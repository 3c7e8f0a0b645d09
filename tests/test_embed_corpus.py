"""Corpus scale: torchrun ranks, parts, join and --resume give the same file as one process."""

import filecmp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
from conftest import model_flags

from elmo import Embedder
from elmo.cli import main as cli_main
from elmo.embed.corpus import Plan, make_plan, write_parts
from elmo.embed.output_file import OutputSpec

ELMO = str(Path(sys.executable).parent / "elmo")
N_LINES, PART_LINES = 10_000, 1000
# One BLAS thread everywhere: torchrun gives each worker one, and float sums can depend on the count.
ENV = dict(os.environ, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, fixture_sentences):
    """10k short lines cut from the fixture sentences (0-4 tokens, so empty lines too): fast on 2 cores."""
    words = [s.split() for lst in fixture_sentences for s in lst]
    lines = [" ".join(words[i % 30][(i // 30) % 5:(i // 30) % 5 + i % 5]) for i in range(N_LINES)]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference(corpus, allennlp_dir):
    """The output of one plain process."""
    out = corpus.parent / "one-process.hdf5"
    subprocess.run([ELMO, "embed", str(corpus), str(out), *model_flags(allennlp_dir), "--part-lines", str(PART_LINES)],
                   check=True, env=ENV, timeout=600, stderr=subprocess.DEVNULL)
    with h5py.File(out, "r") as f:
        assert len(f) == N_LINES + 1 and f["0"].shape == (3, 0, 32) and f["9999"].shape == (3, 4, 32)
    return out


@pytest.mark.slow  # torchrun
def test_two_ranks_under_torchrun_equal_one_process(tmp_path, corpus, reference, allennlp_dir):
    out = tmp_path / "two-ranks.hdf5"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "--no-python", ELMO,
           "embed", str(corpus), str(out), *model_flags(allennlp_dir), "--part-lines", str(PART_LINES)]
    run = subprocess.run(cmd, env=ENV, timeout=600, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "embedding 10000 lines on 2 rank(s)" in run.stderr
    assert filecmp.cmp(out, reference, shallow=False)  # byte for byte
    assert sorted(os.listdir(tmp_path)) == ["two-ranks.hdf5"]  # the parts are gone


@pytest.mark.slow  # kill and resume
def test_sigkill_then_resume_gives_the_complete_identical_file(tmp_path, corpus, reference, allennlp_dir):
    out = tmp_path / "out.hdf5"
    parts = tmp_path / "out.hdf5.parts"
    cmd = [ELMO, "embed", str(corpus), str(out), *model_flags(allennlp_dir), "--part-lines", str(PART_LINES)]
    proc = subprocess.Popen(cmd, env=ENV, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (parts.is_dir() and len(list(parts.glob("lines-*.h5"))) >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not out.exists()
    done = len(list(parts.glob("lines-*.h5")))
    assert 2 <= done < N_LINES // PART_LINES

    resumed = subprocess.run(cmd + ["--resume"], env=ENV, timeout=600, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{done} already written; embedding {N_LINES - done * PART_LINES} lines" in resumed.stderr
    assert filecmp.cmp(out, reference, shallow=False)
    assert not parts.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def leave_parts(tmp_path, model_dir, blocks, spec=OutputSpec()):
    """The parts a killed run of `model_dir` would leave: 40 lines in blocks of 10, some written."""
    path = tmp_path / "c.txt"
    path.write_text("\n".join(f"line {i} of the corpus" for i in range(40)) + "\n", encoding="utf-8")
    embedder = Embedder.from_files(model_dir / "options.json", model_dir / "lm_weights.hdf5")
    out = str(tmp_path / "o.hdf5")
    plan = make_plan(embedder, str(path), out, spec, part_lines=10, use_sentence_keys=False, overwrite=False,
                     resume=False)
    write_parts(embedder, plan, blocks, spec, batch_size=64, bar=_NoBar())  # the CLI default
    return path, out


class _NoBar:
    def update(self, n=1):
        pass


def test_resume_refuses_a_part_from_another_model(tmp_path, allennlp_dir, bilm_tf_dir, capsys):
    path, out = leave_parts(tmp_path, bilm_tf_dir, [0, 1])
    code = cli_main(["embed", str(path), out, *model_flags(allennlp_dir), "--part-lines", "10", "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{out}.parts/lines-000000000000-000000000010.h5: written by another model" in err
    assert not os.path.exists(out)


def test_resume_refuses_parts_with_other_settings_or_input(tmp_path, allennlp_dir, capsys):
    path, out = leave_parts(tmp_path, allennlp_dir, [2], OutputSpec(dtype="float16"))
    base = ["embed", str(path), out, *model_flags(allennlp_dir), "--resume"]
    assert cli_main(base + ["--part-lines", "10"]) == 2
    assert "lines-000000000020-000000000030.h5: written with other settings (dtype='float16' there, " \
           "'float32' now)" in capsys.readouterr().err
    assert cli_main(base + ["--part-lines", "10", "--dtype", "float16", "--top"]) == 2
    assert "output_format='all' there, 'top' now" in capsys.readouterr().err
    path.write_text(path.read_text() + "one more line\n")
    assert cli_main(base + ["--part-lines", "10", "--dtype", "float16"]) == 2
    assert "written for another INPUT" in capsys.readouterr().err


def test_resume_keeps_good_parts_and_finishes(tmp_path, allennlp_dir, capsys):
    path, out = leave_parts(tmp_path, allennlp_dir, [1, 3])
    assert cli_main(["embed", str(path), out, *model_flags(allennlp_dir), "--part-lines", "10", "--resume"]) == 0
    assert "2 already written; embedding 20 lines" in capsys.readouterr().err
    reference = tmp_path / "fresh.hdf5"
    assert cli_main(["embed", str(path), str(reference), *model_flags(allennlp_dir), "--part-lines", "10"]) == 0
    assert filecmp.cmp(out, reference, shallow=False)


def test_leftover_parts_without_resume_are_refused(tmp_path, allennlp_dir, capsys):
    path, out = leave_parts(tmp_path, allennlp_dir, [0])
    assert cli_main(["embed", str(path), out, *model_flags(allennlp_dir), "--part-lines", "10"]) == 2
    assert "holds the parts of an earlier, unfinished run; pass --resume" in capsys.readouterr().err
    assert cli_main(["embed", str(path), out, *model_flags(allennlp_dir), "--part-lines", "10", "--overwrite"]) == 0
    assert not os.path.exists(out + ".parts")


@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_shares_cover_the_missing_blocks_once_in_contiguous_runs(world):
    blocks = [(i * 10, i * 10 + 10) for i in range(12)]
    plan = Plan("parts", {}, blocks, tokens=[5, 80, 0, 0, 40, 3, 3, 3, 60, 1, 1, 30], todo=[0, 1, 2, 4, 5, 8, 9, 11])
    shares = [plan.share(rank, world) for rank in range(world)]
    assert [b for share in shares for b in share] == plan.todo
    for share in filter(None, shares):
        first = plan.todo.index(share[0])
        assert share == plan.todo[first:first + len(share)]
    if world == 2:  # weights tokens + lines: 15+90+10+50 = 165 | 13+70+11+40 = 134 (each block where its middle falls)
        assert shares == [[0, 1, 2, 4], [5, 8, 9, 11]]
