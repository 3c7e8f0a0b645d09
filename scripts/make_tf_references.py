"""Reference TensorFlow checkpoints for tests/test_tf_*.py, made by TensorFlow's own code (issue #58).

Runs in the TensorFlow peer venv (../shared/tools/tensorflow-peer-venv.sh), never in the package's:

    TF_USE_LEGACY_KERAS=1 $TF_VENV/bin/python scripts/make_tf_references.py --bilm-tf BILM_TF_CHECKOUT --work SCRATCH

Writes tests/data/tf/:
- dtypes/: one SaveV2 checkpoint with a tensor of every dtype TensorFlow saves that the reader reads, scalars,
  zero-size and non-ASCII names; sharded/: two SaveV2 shards merged by MergeV2Checkpoints (2 data files);
  many/: 6000 tensors, so that the index table has several data blocks; sliced/: a tensor saved as a slice
  (refused by the reader); object/: a tf.train.Checkpoint (object graph as a string tensor).
- bilm-run/: a tiny character model trained by bilm-tf's own `train()` (allenai/bilm-tf, TF1 code under
  tf.compat.v1) on ../shared/fixtures/bilm-tf-model/train: options.json, the newest checkpoint and its `checkpoint`
  index (its paths rewritten relative to the directory, as TensorFlow writes them with save_relative_paths);
  bilm-weights.hdf5 from bilm-tf's `dump_weights`; heldout.txt and its perplexity from bilm-tf's `test()`.
  (bilm-tf's end of test data, a StopIteration inside a generator, is turned back into the end of the batches, as
  before PEP 479.)
- expected.json: for every checkpoint, every tensor as TensorFlow's own reader (tf.train.load_checkpoint) gives it:
  dtype, shape, sha256 of its bytes (strings: their values, hex); for many/, the sha256 of all those entries as
  sorted JSON, with a sample.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO.parent / "shared" / "fixtures" / "bilm-tf-model" / "train"
HELDOUT = ["the neural networks use continuous representations of words .",
           "language models make predictions of the next word in a sequence .",
           "larger vocabulary embeddings increase the number of sequences , as in neural nets ."]
BILM_OPTIONS = {
    "bidirectional": True,
    "char_cnn": {"activation": "relu", "embedding": {"dim": 4}, "filters": [[1, 4], [2, 4], [3, 8], [4, 16], [5, 32]],
                 "max_characters_per_token": 50, "n_characters": 261, "n_highway": 2},
    "dropout": 0.1,
    "lstm": {"cell_clip": 3, "dim": 16, "n_layers": 2, "proj_clip": 3, "projection_dim": 8,
             "use_skip_connections": True},
    "all_clip_norm_val": 10.0, "n_epochs": 20, "n_train_tokens": 134, "batch_size": 2, "unroll_steps": 10,
    "n_negative_samples_batch": 16,
}


def dtype_tensors() -> dict[str, tf.Tensor]:
    rng = np.random.default_rng(58)
    normal = rng.standard_normal
    return {
        "float32/matrix": tf.constant(normal((5, 7)).astype(np.float32)),
        "float32/rank3": tf.constant(normal((2, 3, 4)).astype(np.float32)),
        "float32/scalar": tf.constant(np.float32(3.25)),
        "float32/empty": tf.zeros((0, 3), tf.float32),
        "float64/vector": tf.constant(normal(6)),
        "float16/matrix": tf.constant(normal((3, 4)).astype(np.float16)),
        "bfloat16/vector": tf.cast(tf.constant(normal(5).astype(np.float32)), tf.bfloat16),
        "int8/vector": tf.constant(np.arange(-4, 4, dtype=np.int8)),
        "int16/vector": tf.constant(np.array([-300, 0, 300], np.int16)),
        "int32/matrix": tf.constant(rng.integers(-2**31, 2**31 - 1, (4, 2), dtype=np.int32)),
        "int64/global_step": tf.constant(np.int64(935588)),
        "int64/vector": tf.constant(np.array([-2**62, -1, 2**40], np.int64)),
        "uint8/vector": tf.constant(np.arange(250, 256, dtype=np.uint8)),
        "uint16/vector": tf.constant(np.array([1, 65535], np.uint16)),
        "uint32/vector": tf.constant(np.array([7, 2**32 - 1], np.uint32)),
        "uint64/vector": tf.constant(np.array([9, 2**64 - 1], np.uint64)),
        "bool/vector": tf.constant([True, False, True]),
        "complex64/vector": tf.constant(np.array([1 + 2j, -3.5j], np.complex64)),
        "complex128/vector": tf.constant(np.array([0.5 - 1j], np.complex128)),
        "string/scalar": tf.constant(b"bilm-tf"),
        "string/vector": tf.constant([b"", "ünïcödé".encode(), b"\x00\xff" * 70]),
        "lm/ünïcode name": tf.constant(np.float32([1, 2])),
    }


def save(prefix: Path, tensors: dict[str, tf.Tensor], slices: list[str] | None = None) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=slices or [""] * len(names),
                      tensors=[tensors[n] for n in names])


def make_small(out: Path) -> None:
    save(out / "dtypes" / "ckpt", dtype_tensors())
    parts = [out / "sharded" / "part-0", out / "sharded" / "part-1"]
    save(parts[0], {"a/first": tf.constant(np.float32([[1, 2], [3, 4]])), "c/third": tf.constant(np.int64([5]))})
    save(parts[1], {"b/second": tf.constant(np.float16([0.5, -2])), "d/fourth": tf.constant(np.int32(7))})
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=[str(p) for p in parts],
                                  destination_prefix=str(out / "sharded" / "ckpt"), delete_old_dirs=False)
    rng = np.random.default_rng(6000)
    many = {f"layer_{i:04d}/{hashlib.sha1(str(i).encode()).hexdigest()}/kernel": tf.constant(np.int8(i % 127))
            for i in range(6000)}
    many["softmax/W"] = tf.constant(rng.standard_normal((3, 2)).astype(np.float32))
    save(out / "many" / "ckpt", many)
    save(out / "sliced" / "ckpt", {"partitioned/W": tf.constant(np.float32([[1, 2], [3, 4]]))}, ["4 2 0,2:-"])
    variable = tf.Variable(np.float32([[1.5, -2.5]]), name="v")
    tf.train.Checkpoint(v=variable, step=tf.Variable(np.int64(3))).write(str(out / "object" / "ckpt"))


def expected_tensors(prefix: Path) -> dict:
    """Every tensor as TensorFlow's own checkpoint reader gives it."""
    reader = tf.train.load_checkpoint(str(prefix))
    dtypes = reader.get_variable_to_dtype_map()
    out = {}
    for name, shape in sorted(reader.get_variable_to_shape_map().items()):
        value = reader.get_tensor(name)
        entry = {"dtype": dtypes[name].name, "shape": list(shape)}
        if dtypes[name] == tf.string:
            entry["values"] = [bytes(v).hex() for v in np.asarray(value, dtype=object).reshape(-1)]
        else:
            entry["sha256"] = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        out[name] = entry
    return out


def summarized(tensors: dict, keep: int = 20) -> dict:
    """A checkpoint of thousands of tensors as one digest of all their entries (names, dtypes, shapes, sha256)."""
    text = json.dumps(tensors, sort_keys=True, ensure_ascii=False)
    sample = dict(list(tensors.items())[:keep])
    return {"count": len(tensors), "digest": hashlib.sha256(text.encode("utf-8")).hexdigest(), "sample": sample}


def import_bilm(checkout: Path):
    """bilm-tf's training module on TensorFlow 2: graph mode, `tensorflow` aliased to tf.compat.v1 while importing."""
    tf1 = tf.compat.v1
    tf1.disable_v2_behavior()
    sys.path.insert(0, str(checkout))
    real = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = tf1
    try:
        import bilm.data
        import bilm.training
    finally:
        sys.modules["tensorflow"] = real
    return bilm.training, bilm.data


def until_stop(iter_batches):
    """bilm-tf ends its test data by raising StopIteration inside a generator, a RuntimeError since Python 3.7
    (PEP 479): end the batches there instead, as it did on the Python it was written for."""
    def batches(*args, **kwargs):
        try:
            yield from iter_batches(*args, **kwargs)
        except RuntimeError as e:
            if not isinstance(e.__cause__, StopIteration):
                raise
    return batches


def make_bilm(out: Path, work: Path, checkout: Path) -> dict:
    training, data = import_bilm(checkout)
    save_dir = work / "bilm-save"
    shutil.rmtree(save_dir, ignore_errors=True)
    save_dir.mkdir(parents=True)
    vocab = training.load_vocab(str(FIXTURE / "vocab.txt"), 50)
    options = dict(BILM_OPTIONS, n_tokens_vocab=vocab.size)
    tf.compat.v1.set_random_seed(58)
    np.random.seed(58)
    train_data = data.BidirectionalLMDataset(str(FIXTURE / "data.txt"), vocab, test=False, shuffle_on_load=True)
    training.train(options, train_data, 1, str(save_dir), str(save_dir))
    tf.compat.v1.reset_default_graph()
    run = out / "bilm-run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    training.dump_weights(str(save_dir), str(out / "bilm-weights.hdf5"))
    tf.compat.v1.reset_default_graph()
    heldout = out / "heldout.txt"
    heldout.write_text("\n".join(HELDOUT) + "\n", encoding="utf-8")
    _, ckpt = training.load_options_latest_checkpoint(str(save_dir))
    test_data = data.BidirectionalLMDataset(str(heldout), vocab, test=True, shuffle_on_load=False)
    test_data.iter_batches = until_stop(test_data.iter_batches)
    perplexity = float(training.test(options, ckpt, test_data, batch_size=1))
    newest = Path(ckpt).name
    for path in save_dir.glob(newest + ".*"):
        if not path.name.endswith(".meta"):  # the graph: TensorFlow's, not read, and the largest file
            shutil.copy(path, run / path.name)
    shutil.copy(save_dir / "options.json", run / "options.json")
    (run / "checkpoint").write_text(f'model_checkpoint_path: "{newest}"\nall_model_checkpoint_paths: "{newest}"\n',
                                    encoding="utf-8")
    return {"checkpoint": newest, "test_batch_size": 1, "heldout": heldout.name, "perplexity": perplexity,
            "tensorflow": tf.__version__}


def make_large(prefix: Path, tensors: int = 8, mib: int = 128) -> None:
    """A checkpoint of `tensors` float32 tensors of `mib` MiB each (not committed: for measuring the reader's memory)."""
    rows = mib * (1 << 20) // 4 // 1024
    save(prefix, {f"lm/big_{i}": tf.fill([rows, 1024], float(i)) for i in range(tensors)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bilm-tf", type=Path, help="a checkout of github.com/allenai/bilm-tf")
    parser.add_argument("--work", type=Path, help="scratch directory for bilm-tf's training run")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "tf")
    parser.add_argument("--large", type=Path, help="only write a 1 GiB checkpoint (8 x 128 MiB) at this prefix")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if args.large:
        make_large(args.large)
        return
    if args.bilm_tf is None or args.work is None:
        parser.error("--bilm-tf and --work are needed for the reference files")
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    make_small(args.out)
    for part in ("part-0", "part-1"):  # merged into ckpt; only the merged checkpoint is kept
        for path in (args.out / "sharded").glob(part + ".*"):
            path.unlink()
    bilm = make_bilm(args.out, args.work, args.bilm_tf)
    expected = {name: expected_tensors(args.out / name / "ckpt") for name in ("dtypes", "sharded", "object")}
    expected["many"] = summarized(expected_tensors(args.out / "many" / "ckpt"))
    expected["bilm-run"] = expected_tensors(args.out / "bilm-run" / bilm["checkpoint"])
    expected["bilm_tf_test"] = bilm
    (args.out / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {sum(p.stat().st_size for p in args.out.rglob('*') if p.is_file())} bytes")


if __name__ == "__main__":
    main()
