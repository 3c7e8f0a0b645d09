"""Keep freed memory in the process instead of handing it back to the OS (glibc, CPU work).

glibc serves every allocation above 32 MB with a fresh `mmap` and unmaps it again on `free`, so
each batch's large activations are page-faulted in anew: at the `original` size one LSTM layer's
gate inputs for all time steps of a batch of 64 are ~100 MB, and the sampled softmax's logits are
~80 MB per direction. Zero-filling those pages cost 12-13% of CPU embedding time and ~10% of a
`tiny` training step (docs/performance.md). Serving them from the heap and never trimming it makes
the next batch reuse the same pages. The price: the process keeps its peak memory, and because
torch asks for 64-byte-aligned blocks, a freed block is not always reused at once, so the heap can
settle at a few times the largest buffer (+150-300 MB for `original` embedding, measured).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from elmo.errors import ModelFileError

from .options import BiLMConfig

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_applied = False


def keep_freed_memory() -> bool:
    """Apply once per process; True when glibc took the settings.

    Does nothing off Linux/glibc, or when the environment sets ELMO_KEEP_FREED_MEMORY=0.
    """
    global _applied
    if _applied:
        return True
    if os.environ.get("ELMO_KEEP_FREED_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    mallopt = _glibc("mallopt")
    if mallopt is None:  # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    return _applied


def return_freed_memory() -> bool:
    """Hand the heap's free pages back to the OS now (glibc's `malloc_trim`); True when it ran.

    For a one-off release that should show in RSS, such as the float32 weights an int8 load converts
    and frees part by part: freed between other allocations, they would otherwise stay resident as free
    heap (90 MB at the `original` shapes, measured). Does nothing off Linux/glibc.
    """
    trim = _glibc("malloc_trim") if sys.platform.startswith("linux") else None
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


def _glibc(function: str):
    """The C library's `function`, or None where the library has none (not glibc)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), function)
    except (OSError, AttributeError):
        return None


def physical_memory() -> int | None:
    """Bytes of RAM, where the OS says (None elsewhere: no check)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_memory(config: BiLMConfig) -> None:
    """Refuse an architecture whose float32 weights alone exceed this machine's memory, with the sizes,
    instead of letting torch fail on a huge allocation (called where a BiLM is built)."""
    need, memory = 4 * config.parameter_count(), physical_memory()
    if memory is not None and need > memory:
        raise ModelFileError(f"{config.source}: this architecture has {need // 4:,} parameters ({need / 2**30:,.1f} "
                             f"GiB as float32), more than this machine's {memory / 2**30:,.1f} GiB of memory "
                             f"(lstm.dim {config.dim}, lstm.projection_dim {config.projection_dim}, "
                             f"{config.n_filters} char-CNN filters)")
