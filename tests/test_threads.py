"""elmo.model.threads: the CPUs a process may use (affinity, cgroup quota), the default thread count, and the waiting
policy set before torch loads (docs/performance.md#threads-on-shared-cores)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from elmo.errors import InputError
from elmo.model import threads


def cgroup(tmp_path, v2: str | None = None, v1: tuple[str, str] | None = None):
    """A fake cgroup root: v2's cpu.max and/or v1's cpu/cpu.cfs_quota_us + cpu.cfs_period_us."""
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    return tmp_path


@pytest.mark.parametrize("v2, v1, quota", [
    ("150000 100000", None, 1.5),          # docker --cpus 1.5 on cgroup v2
    ("max 100000", None, None),            # v2, no limit
    (None, ("200000", "100000"), 2.0),     # v1 quota
    (None, ("-1", "100000"), None),        # v1, no limit
    (None, None, None),                    # no cgroup files at all
    ("garbage", None, None),               # unreadable: no limit assumed, never a crash
])
def test_cgroup_quota(tmp_path, v2, v1, quota):
    assert threads._cgroup_quota(cgroup(tmp_path, v2, v1)) == quota


def test_usable_cpus_bounded_by_affinity_and_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert threads.usable_cpus(tmp_path / "no-cgroup") == 8
    assert threads.usable_cpus(cgroup(tmp_path, v2="250000 100000")) == 3  # 2.5 CPUs round up
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert threads.usable_cpus(tmp_path) == 1  # the affinity bounds the quota too


def test_half_a_cpu_is_one(tmp_path):
    assert threads.usable_cpus(cgroup(tmp_path, v2="50000 100000")) == 1  # never zero


@pytest.mark.slow  # a second interpreter imports torch
def test_usable_cpus_follows_affinity(tmp_path):
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux and 2 CPUs to narrow the affinity")
    code = ("import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from elmo.model.threads import usable_cpus; from pathlib import Path; print(usable_cpus(Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


@pytest.mark.parametrize("env, passive, expected", [
    ({"OMP_NUM_THREADS": "3"}, True, 3),                   # the user's (or torchrun's, Ray's) choice wins
    ({"OMP_NUM_THREADS": "3"}, False, 3),
    ({}, True, 4),                                         # passive waiting: every usable CPU (quota 4 of 8)
    ({"LOCAL_WORLD_SIZE": "2"}, True, 2),                  # torchrun's ranks share the machine's CPUs
    ({"LOCAL_WORLD_SIZE": "8"}, True, 1),
    ({}, False, 1),                                        # spinning OpenMP: one thread never waits on another
    ({"OMP_NUM_THREADS": "zero"}, True, 4),                # not a count: ignored
])
def test_default_threads(tmp_path, monkeypatch, env, passive, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert threads.default_threads(env, cgroup(tmp_path, v2="400000 100000"), passive=passive) == expected


def test_waiting_policy_set_only_before_torch():
    env: dict[str, str] = {}
    assert threads._prefer_passive_waiting(env, torch_loaded=False) and env["OMP_WAIT_POLICY"] == "PASSIVE"
    env = {}
    assert not threads._prefer_passive_waiting(env, torch_loaded=True) and "OMP_WAIT_POLICY" not in env
    env = {"OMP_WAIT_POLICY": "active"}  # the user's choice is kept
    assert not threads._prefer_passive_waiting(env, torch_loaded=False) and env["OMP_WAIT_POLICY"] == "active"
    assert threads._prefer_passive_waiting({"OMP_WAIT_POLICY": "passive"}, torch_loaded=True)


@pytest.mark.slow  # a second interpreter imports torch
@pytest.mark.parametrize("order, policy, passive", [("elmo, torch", "PASSIVE", True),
                                                    ("torch, elmo", "None", False)])
def test_import_order_decides_the_policy(order, policy, passive):
    """`import elmo` first sets the passive policy before torch loads; torch first keeps OpenMP's spinning, and
    then the default is one thread."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    code = (f"import os, {order}; from elmo.model.threads import default_threads, usable_cpus; "
            "print(os.environ.get('OMP_WAIT_POLICY'), default_threads(), usable_cpus())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    found, default, cpus = out.stdout.split()
    assert found == policy
    assert int(default) == (int(cpus) if passive else 1)


def test_set_and_ensure_threads():
    before = torch.get_num_threads()
    try:
        assert threads.set_threads(1) == 1 and torch.get_num_threads() == 1
        assert threads.ensure_threads() == 1  # a count this process set is kept by the Embedder's default
        assert threads.ensure_threads(2) == 2 and torch.get_num_threads() == 2
        with pytest.raises(InputError, match="--threads 0: expected a positive whole number"):
            threads.set_threads(0, "--threads")
        with pytest.raises(InputError, match="threads True"):
            threads.ensure_threads(True)
    finally:
        torch.set_num_threads(before)


def test_embedder_takes_threads(tmp_path):
    from elmo import Embedder

    before = torch.get_num_threads()
    try:
        embedder = Embedder.from_model("default", threads=1)
        assert embedder.threads == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_embed_refuses_bad_threads(tmp_path):
    from elmo.cli import main

    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    assert main(["embed", str(text), str(tmp_path / "out.hdf5"), "--threads", "0"]) == 2
    assert not (tmp_path / "out.hdf5").exists()
