"""What `elmo train` writes as it goes: metrics.jsonl (one record per `--log-every` steps, and the
held-out scorings), the progress bar, and on resume the log cut back to the checkpoint's step."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from elmo.files.fileio import atomic_path
from elmo.files.layout import METRICS_FILE
from elmo.training.settings import OBJECTIVES


class Progress:
    """Loss and token counts since the last log record; the metrics file and the progress bar."""

    def __init__(self, out: Path, rank: int, show: bool, max_steps: int, step: int, objective: str = "mean"):
        self.objective = objective
        self.log = open(out / METRICS_FILE, "a", encoding="utf-8") if rank == 0 else None  # noqa: SIM115 (closed by close())
        self.bar = None
        if rank == 0 and show:
            from tqdm import tqdm

            self.bar = tqdm(total=max_steps, initial=step, unit="step", dynamic_ncols=True, smoothing=0.05,
                            mininterval=1.0 if sys.stderr.isatty() else 30.0, desc="train")
        self.last = time.time()
        self.summary: dict = {}
        self._reset()

    def _reset(self) -> None:
        self.window = {"loss_f": 0.0, "loss_b": 0.0, "steps": 0, "tokens": 0}

    def add(self, loss_f: float, loss_b: float, tokens: int) -> None:
        w = self.window
        w["loss_f"], w["loss_b"], w["steps"], w["tokens"] = w["loss_f"] + loss_f, w["loss_b"] + loss_b, w["steps"] + 1, w["tokens"] + tokens

    def write(self, step: int, tokens: int, elapsed: float, norm: float, lr: float, phase: str | None = None) -> None:
        now = time.time()
        entry = record(step, tokens, self.window, now - self.last, elapsed, norm, lr, self.objective)
        if phase is not None:
            entry["phase"] = phase
        self._reset()
        self.last, self.summary = now, entry
        self.append(entry)
        if self.bar is not None:
            self.bar.set_postfix_str(f"{entry['tok_s']:,.0f} tok/s, loss {entry['loss']:.3f}, ppl {entry['ppl']:.1f}", refresh=False)

    def append(self, entry: dict) -> None:
        """One record into metrics.jsonl (rank 0's log; other ranks write nothing)."""
        if self.log is not None:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()

    def tick(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
        if self.bar is not None:
            self.bar.close()


def _step_of(line: str) -> float:
    """The step of a metrics.jsonl record; a damaged line (a kill mid-write) counts as after any checkpoint."""
    try:
        record = json.loads(line)
        return record["step"] if isinstance(record, dict) and isinstance(record.get("step"), int) else math.inf
    except ValueError:
        return math.inf


def truncate_metrics(path: Path, step: int) -> None:
    """On resume, drop log records written after the checkpoint by the interrupted run."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if _step_of(line) <= step]
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in keep)



def record(step, tokens, window, seconds, elapsed, norm, lr, objective: str = "mean") -> dict:
    """`loss` and `ppl`: per direction trained, so `forward`'s are the forward LM's, not a mean with an untrained one."""
    loss_f, loss_b = window["loss_f"] / window["steps"], window["loss_b"] / window["steps"]
    w_f, w_b = OBJECTIVES[objective]
    loss = (w_f * loss_f + w_b * loss_b) / (w_f + w_b)
    return {"step": step, "tokens": tokens, "loss": loss, "loss_forward": loss_f, "loss_backward": loss_b,
            "ppl": math.exp(min(loss, 700.0)), "tok_s": window["tokens"] / max(seconds, 1e-9), "grad_norm": norm,
            "lr": lr, "elapsed_s": round(elapsed, 3)}
