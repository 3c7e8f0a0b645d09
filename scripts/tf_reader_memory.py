"""Peak memory of reading a TensorFlow checkpoint tensor by tensor with elmo.tf (issue #58; docs/tensorflow.md).

    TF_USE_LEGACY_KERAS=1 $TF_VENV/bin/python scripts/make_tf_references.py --large SCRATCH/large/ckpt
    .venv/bin/python scripts/tf_reader_memory.py SCRATCH/large/ckpt

Reads every tensor of the checkpoint once (each checked against its CRC), keeping none, and prints the process's
peak resident memory before and after: it grows by about the largest tensor, not by the checkpoint.
"""

from __future__ import annotations

import argparse
import resource

from elmo.tf import TFCheckpoint


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefix", help="a TensorFlow checkpoint prefix")
    args = parser.parse_args(argv)
    ckpt = TFCheckpoint(args.prefix)
    before = peak_mib()
    total = largest = 0
    for name in ckpt.names():
        size = ckpt.read(name).nbytes
        total, largest = total + size, max(largest, size)
    print(f"{len(ckpt.names())} tensors, {total / 2**20:.0f} MiB (largest {largest / 2**20:.0f} MiB): peak RSS "
          f"{before:.0f} MiB before reading, {peak_mib():.0f} MiB after")


if __name__ == "__main__":
    main()
