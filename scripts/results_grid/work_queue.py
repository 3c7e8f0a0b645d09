"""Running the plan: each run once, under a lock file beside its metrics, so several copies of the same
command share the grid and a stopped grid resumes where it was."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from .grid import Grid, Run, arm_of, static_command


def elmo_command() -> list[str]:
    exe = Path(sys.executable).parent / "elmo"
    return [str(exe)] if exe.exists() else [shutil.which("elmo") or "elmo"]


def run_grid(grid: Grid, runs: list[Run]) -> None:
    grid.out.mkdir(parents=True, exist_ok=True)
    runs = [run for run in runs if arm_of(run.name) in grid.arms]
    if not grid.static.exists():
        grid.static.parent.mkdir(parents=True, exist_ok=True)
        cmd = static_command(grid)
        print("+ elmo " + shlex.join(cmd), flush=True)
        _run(grid, cmd)
    for i, (name, cmd) in enumerate(runs, 1):
        target = grid.out / name
        if target.exists() or (i - 1) % grid.shard[1] != grid.shard[0]:
            continue
        lock = claim(target)
        if lock is None:
            print(f"[{i}/{len(runs)}] {name}: running in another process", flush=True)
            continue
        try:
            if target.exists():  # finished by another process after our first look
                continue
            cmd = cmd + ["--out", str(target)]
            print(f"[{i}/{len(runs)}] + elmo {shlex.join(cmd)}", flush=True)
            started = time.time()
            _run(grid, cmd)
            print(f"    done in {time.time() - started:.0f}s", flush=True)
        finally:
            lock.unlink(missing_ok=True)


def claim(target: Path) -> Path | None:
    """Take a run for this process: a lock file beside its metrics, created exclusively, naming host and pid.

    So several copies of the same command share the grid, each taking the next run nobody holds. A lock
    whose process is gone (a killed run) is taken over; one from another host is respected.
    """
    lock = target.with_name(f".{target.name}.lock")
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if _lock_alive(lock):
                return None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        return lock
    return None


def _lock_alive(lock: Path) -> bool:
    try:
        host, pid = lock.read_text().split()
        if host != socket.gethostname():
            return True
        os.kill(int(pid), 0)
    except FileNotFoundError:
        return False
    except ValueError:  # being written right now, or a crash between create and write
        return time.time() - lock.stat().st_mtime < 60 if lock.exists() else False
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _run(grid: Grid, cmd: list[str]) -> None:
    if grid.in_process:
        from elmo.cli import main
        code = main(cmd)
    else:
        code = subprocess.call(elmo_command() + cmd)
    if code != 0:
        sys.exit(f"run failed with exit code {code}: elmo {shlex.join(cmd)}")

