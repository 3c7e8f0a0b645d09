"""How many torch threads a process uses, chosen on purpose rather than left to torch.

torch sizes its intra-op pool by the machine's cores. A process may use fewer: its CPU affinity (taskset,
Ray's and Kubernetes' placement) and its cgroup's CPU quota (docker --cpus) both bound it. Every place that
runs the biLM (the `Embedder`, `elmo embed`, `elmo serve`'s workers, the spaCy layer and component, flair's
embeddings, Ray actors) asks here, so one rule decides.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from .errors import InputError

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup's quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), or None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """The CPUs this process may run on: its affinity, bounded by its cgroup's quota (rounded up), at least 1."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        allowed = os.cpu_count() or 1
    quota = _cgroup_quota(root)
    if quota is not None:
        allowed = min(allowed, math.ceil(quota))
    return max(1, allowed)


def default_threads() -> int:
    """The thread count used when none is given: every CPU the process may use."""
    return usable_cpus()


def check_threads(threads: object, flag: str = "threads") -> int:
    """A thread count from a user (a flag, a config, a keyword): a positive int, or an `InputError` naming it."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"{flag} {threads!r}: expected a positive whole number of threads")
    return threads


def set_threads(threads: int | None = None, flag: str = "threads") -> int:
    """Set torch's intra-op threads to `threads`, or to `default_threads()` when None; returns the count set."""
    count = default_threads() if threads is None else check_threads(threads, flag)
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count
