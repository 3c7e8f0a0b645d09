"""How many torch threads a process uses, chosen on purpose rather than left to torch, and how they wait.

torch sizes its intra-op pool by the machine's cores. A process may use fewer: its CPU affinity (taskset,
Ray's and Kubernetes' placement) and its cgroup's CPU quota (docker --cpus) both bound it, and so do the other
ranks torchrun started on the same machine. Every place that runs the biLM (the `Embedder`, `elmo embed`,
`elmo serve`'s workers, the spaCy layer and component, flair's embeddings, Ray actors) asks here, so one rule
decides.

Why the waiting policy matters (docs/performance.md#threads-on-shared-cores, benchmarks/threads_shared.py):
torch's OpenMP threads meet at a barrier after every parallel region, several per LSTM step, and by default
(GNU OpenMP's active policy) a thread that arrives first spins for up to ~300,000 iterations before it sleeps.
Where the cores are shared, the spinning thread holds a core that its partner, or another process, needs, and
every barrier waits for a descheduled thread: 2 threads then ran 2.6x slower than 1 beside one CPU-bound
process and up to 6-9x beside several. With the passive policy a waiting thread sleeps at once and the loss
is gone (1.0-1.3x of 1 thread). OpenMP reads the policy once, when torch loads, so this module sets
OMP_WAIT_POLICY=PASSIVE (unless the user set it) when it is imported before torch, as `import elmo` does
first of all. Where torch was loaded earlier under the active policy, the default is 1 thread.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from elmo.errors import InputError

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _prefer_passive_waiting(environ: dict | os._Environ = os.environ, torch_loaded: bool | None = None) -> bool:
    """Ask OpenMP for the passive waiting policy if torch has not loaded yet (and the user chose none);
    True when the policy in force is passive."""
    if torch_loaded is None:
        torch_loaded = "torch" in sys.modules
    if not torch_loaded:
        environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive"


PASSIVE_WAITING = _prefer_passive_waiting()


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


def _env_count(environ, name: str) -> int | None:
    """A positive whole number from the environment, or None where unset or not one."""
    try:
        value = int(environ.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def default_threads(environ: dict | os._Environ = os.environ, root: Path = CGROUP_ROOT,
                    passive: bool | None = None) -> int:
    """The thread count used when none is given.

    OMP_NUM_THREADS where set (a user's choice; torchrun sets 1 per rank, Ray its actor's CPUs). Otherwise the
    usable CPUs shared among the ranks torchrun started on this machine (LOCAL_WORLD_SIZE), if OpenMP waits
    passively; 1 if it spins (torch loaded before elmo without OMP_WAIT_POLICY=passive), which never loses the
    several-fold a spinning second thread loses on shared cores.
    """
    chosen = _env_count(environ, "OMP_NUM_THREADS")
    if chosen is not None:
        return chosen
    if not (PASSIVE_WAITING if passive is None else passive):
        return 1
    return max(1, usable_cpus(root) // (_env_count(environ, "LOCAL_WORLD_SIZE") or 1))


def check_threads(threads: object, flag: str = "threads") -> int:
    """A thread count from a user (a flag, a config, a keyword): a positive int, or an `InputError` naming it."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"{flag} {threads!r}: expected a positive whole number of threads")
    return threads


_SET_IN: dict[int, int] = {}  # process id -> the count set_threads set there (a forked child starts afresh)


def set_threads(threads: int | None = None, flag: str = "threads") -> int:
    """Set torch's intra-op threads to `threads`, or to `default_threads()` when None; returns the count set."""
    import torch  # here, not above: this module is imported before torch so that the waiting policy takes effect

    count = default_threads() if threads is None else check_threads(threads, flag)
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    _SET_IN[os.getpid()] = count
    return count


def ensure_threads(threads: int | None = None, flag: str = "threads") -> int:
    """What a model's constructor calls (the `Embedder`'s): `threads` if given; otherwise the count this
    process already set through `set_threads` (`elmo serve --threads`, a Ray actor's CPUs) is kept, and
    only a process that chose none gets `default_threads()`."""
    import torch

    if threads is None and os.getpid() in _SET_IN:
        return torch.get_num_threads()
    return set_threads(threads, flag)
