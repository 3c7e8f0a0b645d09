"""`elmo embed-dataset` as a user runs it: a local Ray cluster on 127.0.0.1 started and stopped by the command,
leaving no Ray process behind; a rerun skips what was written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray loads: a local node's address is 127.0.0.1
pytest.importorskip("ray", reason="Ray Data is the [ray] extra")
from conftest import subprocess_env  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster starts in seconds, its actors load torch


def processes_marked(mark: str) -> set[int]:
    """Processes whose environment holds `mark`: the command and every process it started (Ray's GCS, raylet and
    workers inherit it), whatever other Ray clusters run on the machine."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark.encode() in f.read():
                        found.add(int(entry))
            except OSError:
                continue
    return found


def test_embed_dataset_command_leaves_no_ray_process(tmp_path):
    text = tmp_path / "lines.txt"
    text.write_text("".join(f"sentence number {n} is here .\n" for n in range(10)))
    command = [sys.executable, "-m", "elmo", "embed-dataset", str(text), str(tmp_path / "out"), "--average", "--pool",
               "mean", "--part-rows", "4", "--actors", "2", "--no-progress"]
    mark = f"ELMO_RAY_TEST_MARK={uuid.uuid4().hex}"
    env = {**subprocess_env(), "RAY_USAGE_STATS_ENABLED": "0", "ELMO_RAY_TEST_MARK": mark.split("=")[1]}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    assert summary == {**summary, "parts": 3, "parts_skipped": 0, "rows": 10}
    assert sorted(os.listdir(tmp_path / "out")) == ["_elmo_dataset.json", "part-000000.parquet", "part-000001.parquet",
                                                   "part-000002.parquet"]
    time.sleep(1)  # a worker's exit is seen by the OS a moment after its raylet's
    assert processes_marked(mark) == set(), "processes the command started outlived it"
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and json.loads(again.stderr.strip().splitlines()[-1])["parts_skipped"] == 3


def test_embed_dataset_refuses_before_starting_ray(tmp_path):
    done = subprocess.run([sys.executable, "-m", "elmo", "embed-dataset", str(tmp_path / "missing.txt"),
                           str(tmp_path / "out")], env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"elmo embed-dataset: error: {tmp_path / 'missing.txt'}: no such file "
                                                "or folder"]
