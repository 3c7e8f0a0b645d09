"""TF1-Hub-format ELMo modules built from bilm-tf's own graph, and their outputs as TensorFlow gives them (issue #63).

Runs in the TensorFlow peer venv (../shared/tools/tensorflow-peer-venv.sh, plus tensorflow-hub 0.16.1), never in the
package's:

    TF_USE_LEGACY_KERAS=1 $TF_VENV/bin/python scripts/make_tfhub_references.py --bilm-tf BILM_TF_CHECKOUT --work SCRATCH

A module is bilm-tf's `BidirectionalLanguageModel` (allenai/bilm-tf, bilm/model.py, under the scope `bilm`) fed by
character ids made in the graph from strings, and bilm-tf's `weight_layers` (bilm/elmo.py) with its two variables named
as TF-Hub's ELMo names them (`aggregation/weights`, `aggregation/scaling`); two signatures, `default` (sentences split
on spaces by TensorFlow 1's StringSplit, the op the published module runs) and `tokens` (`tokens`, `sequence_len`),
each with the five outputs `word_emb`, `lstm_outputs1`, `lstm_outputs2`, `elmo`, `default`. It is written with
tf.compat.v1.saved_model.Builder (no tags, as TF-Hub's non-training graph) plus `tfhub_module.pb` (ModuleDef, format
V3). The outputs come from `hub.load(path).signatures[...]` in eager TensorFlow 2, in a second process.

Two shims, each keeping bilm-tf's ops: its weight initializers embed every weight in the graph as a constant, so the
graph is built with zero initializers and the same values (bilm-tf's own `_pretrained_initializer`) are loaded into
the variables before saving; `weight_layers` looks its regularizer up by the variable's name, so a zero regularizer
is registered under that name while the variables are renamed.

Writes tests/data/tfhub/:
- fixture-module.tar.gz: the module of the AllenNLP test fixture's weights (skip connections on), mix weights and
  scaling MIX_FIXTURE (arbitrary, not fitted), packed as TF-Hub serves modules; fixture-outputs.npz: both
  signatures' five outputs on SENTENCES and TOKENS, then the `tokens` signature called twice more (`tokens1/`,
  `tokens2/`: the module's LSTM state carries over from call to call); under `all_pooling/` the same from the same
  graph with the `default` output pooled over every position, padding included (TF-Hub's google/elmo/1 and /2).
- skip-off.pb.gz: the graph (saved_model.pb only) of bilm-tf's own test fixture (skip connections off).
- original-outputs.npz + original.json: random weights at the published module's shapes (numpy seed ORIGINAL_SEED,
  `original_weights`), their sha256, and the outputs of `default` on two sentences and of `tokens` on two rows
  (`run_module`); the weights (370 MB) and the module are not kept.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "fixtures"
OUT = REPO / "tests" / "data" / "tfhub"
MIX_FIXTURE = ([0.3, -0.2, 0.5], 1.7)
ORIGINAL_SEED = 63
ORIGINAL_OPTIONS = {
    "lstm": {"use_skip_connections": True, "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096,
             "n_layers": 2},
    "char_cnn": {"activation": "relu", "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                 "n_highway": 2, "embedding": {"dim": 16}, "n_characters": 262, "max_characters_per_token": 50},
}
SENTENCES = [
    "the cat is on the mat",
    "dogs are in the fog",
    "Émile's naïve café  serves crème brûlée .",
    "a " + "verylong" * 8 + " token , then  two  spaces",
    "x",
]
TOKENS = [["the", "cat", "is", "on", "the", "mat"], ["dogs", "are", "in", "the", "fog", ""],
          ["", "an", "empty", "first", "token", "pad"], ["one", "", "", "", "", ""]]
TOKEN_LENGTHS = [6, 5, 5, 1]
SECOND_CALL = ([["the", "fog", "is", "in", "the", "cat"], ["mat", "", "", "", "", ""]], [6, 1])


def original_weights(seed: int = ORIGINAL_SEED) -> dict[str, np.ndarray]:
    """weights.hdf5 datasets at the published module's shapes: N(0, 1/fan_in) matrices, small biases, in name order.
    The package's tests make the same arrays (tests/test_tfhub_original.py) and check their sha256."""
    opts = ORIGINAL_OPTIONS
    proj, dim = opts["lstm"]["projection_dim"], opts["lstm"]["dim"]
    filters, char_dim = opts["char_cnn"]["filters"], opts["char_cnn"]["embedding"]["dim"]
    n_filters = sum(n for _, n in filters)
    shapes = {"char_embed": (261, char_dim), "CNN_proj/W_proj": (n_filters, proj), "CNN_proj/b_proj": (proj,)}
    for i, (width, num) in enumerate(filters):
        shapes[f"CNN/W_cnn_{i}"], shapes[f"CNN/b_cnn_{i}"] = (1, width, char_dim, num), (num,)
    for k in range(opts["char_cnn"]["n_highway"]):
        for part in ("carry", "transform"):
            shapes[f"CNN_high_{k}/W_{part}"], shapes[f"CNN_high_{k}/b_{part}"] = (n_filters, n_filters), (n_filters,)
    for direction in (0, 1):
        for layer in range(opts["lstm"]["n_layers"]):
            root = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            shapes[f"{root}/W_0"], shapes[f"{root}/B"], shapes[f"{root}/W_P_0"] = (2 * proj, 4 * dim), (4 * dim,), (dim, proj)
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name == "char_embed":
            out[name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        elif len(shape) == 1:
            out[name] = (0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        else:
            fan_in = int(np.prod(shape[:-1]))
            out[name] = (rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(fan_in))).astype(np.float32)
    return out


def weights_sha256(weights: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode("utf-8") + np.ascontiguousarray(weights[name], dtype="<f4").tobytes())
    return digest.hexdigest()


# ---------------------------------------------------------------- phase 1: the module (graph mode, bilm-tf's code)

def import_bilm_model(checkout: Path):
    """bilm-tf's model and elmo modules on TensorFlow 2: graph mode, `tensorflow` aliased to tf.compat.v1 while
    importing (as scripts/make_tf_references.py does)."""
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    sys.path.insert(0, str(checkout))
    real = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = tf.compat.v1
    try:
        import bilm.elmo
        import bilm.model
    finally:
        sys.modules["tensorflow"] = real
    return bilm.model, bilm.elmo


def char_ids(tf1, tokens, lengths, max_chars: int):
    """bilm-tf's Batcher in the graph: <S>, each token's first max_chars-2 UTF-8 bytes between begin- and end-of-word
    (the rest padding), </S> after each row's last token, ids +1, zero rows past it: [B, T+2, max_chars] int32."""
    keep = max_chars - 2
    cut = tf1.strings.substr(tokens, 0, keep)
    n = tf1.strings.length(cut)[..., None]
    filled = tf1.strings.substr(tf1.strings.join([cut, tf1.constant("\0" * keep)]), 0, keep)
    data = tf1.cast(tf1.io.decode_raw(filled, tf1.uint8), tf1.int32)  # [B, T, keep]
    data = tf1.pad(data, [[0, 0], [0, 0], [1, 1]])  # slot p holds byte p-1
    p = tf1.range(max_chars)
    codes = tf1.where_v2(tf1.equal(p, 0), 258, tf1.where_v2(p <= n, data, tf1.where_v2(tf1.equal(p, n + 1), 259, 260)))
    steps = tf1.shape(tokens)[1]
    inside = tf1.sequence_mask(lengths, steps)[..., None]
    ids = tf1.where_v2(inside, codes + 1, 0)
    marker = lambda c: tf1.constant([259, c + 1, 260] + [261] * (max_chars - 3), tf1.int32)  # noqa: E731
    ids = tf1.pad(ids, [[0, 0], [0, 1], [0, 0]])
    at_end = tf1.equal(tf1.range(steps + 1)[None, :], lengths[:, None])[..., None]
    ids = tf1.where_v2(at_end, marker(257), ids)
    bos = tf1.broadcast_to(marker(256), [tf1.shape(tokens)[0], 1, max_chars])
    return tf1.concat([bos, ids], axis=1)


def outputs(tf1, bilm_model, bilm_elmo, model, tokens, lengths, max_chars: int, pooling: str) -> dict:
    ops = model(char_ids(tf1, tokens, lengths, max_chars))
    renames = {"elmo_ELMo_W": "weights", "elmo_ELMo_gamma": "scaling"}

    def rename(getter, name, *args, **kwargs):
        kwargs.pop("regularizer", None)
        return getter(name.rsplit("/", 1)[0] + "/" + renames[name.rsplit("/", 1)[1]], *args, **kwargs)

    with tf1.name_scope("elmo_ELMo_W/"):  # weight_layers finds its regularizer by this name
        tf1.add_to_collection(tf1.GraphKeys.REGULARIZATION_LOSSES, tf1.constant(0.0, name="l2"))
    with tf1.variable_scope("aggregation", custom_getter=rename, reuse=tf1.AUTO_REUSE):
        elmo = bilm_elmo.weight_layers("elmo", ops, l2_coef=None)["weighted_op"]
    tf1.get_default_graph().clear_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
    layers, mask = ops["lm_embeddings"], tf1.cast(ops["mask"], tf1.float32)
    if pooling == "tokens":  # google/elmo/3: the mean over each sentence's tokens
        default = tf1.reduce_sum(elmo * mask[..., None], 1) / tf1.reduce_sum(mask, 1, keepdims=True)
    else:  # google/elmo/1 and /2: the mean over every position, padding included
        default = tf1.reduce_mean(elmo, 1)
    proj = int(layers.shape[3]) // 2
    return {"word_emb": layers[:, 0, :, :proj], "lstm_outputs1": layers[:, 1], "lstm_outputs2": layers[:, 2],
            "elmo": elmo, "default": default}


def build_module(checkout: Path, options_file: Path, weight_file: Path, mix, out: Path, pooling: str) -> None:
    import tensorflow as tf

    bilm_model, bilm_elmo = import_bilm_model(checkout)
    tf1 = tf.compat.v1
    pretrained = bilm_model._pretrained_initializer
    bilm_model._pretrained_initializer = lambda *a, **k: tf1.zeros_initializer()
    max_chars = json.loads(options_file.read_text())["char_cnn"]["max_characters_per_token"]
    model = bilm_model.BidirectionalLanguageModel(str(options_file), str(weight_file))
    text = tf1.placeholder(tf1.string, [None], name="default_text")
    split = tf1.string_split(text, delimiter=" ")  # TensorFlow 1's StringSplit: empty pieces skipped
    words = tf1.sparse.to_dense(split, default_value="")
    counts = tf1.math.unsorted_segment_sum(tf1.ones_like(split.indices[:, 0], tf1.int32),
                                           tf1.cast(split.indices[:, 0], tf1.int32), tf1.shape(text)[0])
    tokens = tf1.placeholder(tf1.string, [None, None], name="tokens")
    lengths = tf1.placeholder(tf1.int32, [None], name="sequence_len")
    signatures = {
        "default": ({"default": text}, outputs(tf1, bilm_model, bilm_elmo, model, words, counts, max_chars, pooling)),
        "tokens": ({"tokens": tokens, "sequence_len": lengths},
                   outputs(tf1, bilm_model, bilm_elmo, model, tokens, lengths, max_chars, pooling)),
    }
    info = tf1.saved_model.utils.build_tensor_info
    defs = {name: tf1.saved_model.signature_def_utils.build_signature_def(
        {k: info(v) for k, v in ins.items()}, {k: info(v) for k, v in outs.items()}) for name, (ins, outs) in signatures.items()}
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        for var in tf1.global_variables():
            name = var.op.name
            if name.startswith("bilm/") and "Variable" not in name.split("/")[-1]:
                var.load(pretrained(name, str(weight_file))(var.shape.as_list()), sess)
        by_name = {var.op.name: var for var in tf1.global_variables()}
        by_name["aggregation/weights"].load(np.float32(mix[0]), sess)
        by_name["aggregation/scaling"].load(np.float32([mix[1]]), sess)
        if out.exists():
            shutil.rmtree(out)
        builder = tf1.saved_model.Builder(str(out))
        builder.add_meta_graph_and_variables(sess, [], signature_def_map=defs, strip_default_attrs=True)
        builder.save()
    (out / "tfhub_module.pb").write_bytes(b"\x08\x01")  # ModuleDef {format: FORMAT_V3}


# ---------------------------------------------------------------- phase 2: the outputs (eager, hub.load)

def run_module(module: Path, out_npz: Path, prefix: str = "", append: bool = False) -> None:
    """Every output of both signatures; for the original shapes (prefix "original/", not kept in the file's names)
    two sentences and one `tokens` call, to keep the file small."""
    import tensorflow as tf
    import tensorflow_hub as hub

    loaded = hub.load(str(module))
    found = dict(np.load(out_npz)) if append and out_npz.exists() else {}
    few = prefix == "original/"
    prefix = "" if few else prefix
    default = loaded.signatures["default"](default=tf.constant(SENTENCES[:2] if few else SENTENCES))
    for key, value in default.items():
        found[f"{prefix}default/{key}"] = value.numpy()
    tokens = loaded.signatures["tokens"]
    calls = [(TOKENS[1:3], TOKEN_LENGTHS[1:3])] if few else [(TOKENS, TOKEN_LENGTHS), (TOKENS, TOKEN_LENGTHS), SECOND_CALL]
    for call, (words, lengths) in enumerate(calls):
        result = tokens(tokens=tf.constant(words), sequence_len=tf.constant(lengths, tf.int32))
        for key, value in result.items():
            found[f"{prefix}tokens{call}/{key}"] = value.numpy()
    np.savez_compressed(out_npz, **found)


# ---------------------------------------------------------------- driver

def phase(args: list[str]) -> None:
    subprocess.run([sys.executable, __file__, *args], check=True)


def write_original_inputs(work: Path) -> tuple[Path, Path, str]:
    import h5py

    weights = original_weights()
    options, hdf5 = work / "original-options.json", work / "original-weights.hdf5"
    options.write_text(json.dumps(ORIGINAL_OPTIONS))
    with h5py.File(hdf5, "w") as f:
        for name, value in weights.items():
            f[name] = value
    return options, hdf5, weights_sha256(weights)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bilm-tf", type=Path, required=True, help="a checkout of allenai/bilm-tf (outside the repo)")
    p.add_argument("--work", type=Path, required=True, help="scratch folder outside the repo")
    p.add_argument("--skip-original", action="store_true", help="only the fixture modules")
    p.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phase:
        kind, *rest = args.phase
        if kind == "build":
            build_module(args.bilm_tf, Path(rest[0]), Path(rest[1]), json.loads(rest[2]), Path(rest[3]), rest[4])
        else:
            run_module(Path(rest[0]), Path(rest[1]), rest[2] if len(rest) > 2 else "", append=rest[2:3] == ["all_pooling/"])
        return
    args.work.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    common = ["--bilm-tf", str(args.bilm_tf), "--work", str(args.work), "--phase"]
    fixture = SHARED / "allennlp-elmo"
    mix = json.dumps(MIX_FIXTURE)
    module = args.work / "fixture-module"
    phase([*common, "build", str(fixture / "options.json"), str(fixture / "lm_weights.hdf5"), mix, str(module), "tokens"])
    phase([*common, "run", str(module), str(OUT / "fixture-outputs.npz")])
    with tarfile.open(OUT / "fixture-module.tar.gz", "w:gz") as tar:  # as TF-Hub serves a module: its files at the top
        for path in sorted(module.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(module)), recursive=False)
    phase([*common, "build", str(fixture / "options.json"), str(fixture / "lm_weights.hdf5"), mix,
           str(args.work / "all-pooling"), "all"])
    phase([*common, "run", str(args.work / "all-pooling"), str(OUT / "fixture-outputs.npz"), "all_pooling/"])
    skip_off = SHARED / "bilm-tf-model"
    phase([*common, "build", str(skip_off / "options.json"), str(skip_off / "lm_weights.hdf5"), mix,
           str(args.work / "skip-off"), "tokens"])
    (OUT / "skip-off.pb.gz").write_bytes(gzip.compress((args.work / "skip-off" / "saved_model.pb").read_bytes(), mtime=0))
    if args.skip_original:
        return
    options, hdf5, digest = write_original_inputs(args.work)
    rng = np.random.default_rng(ORIGINAL_SEED + 1)
    mix_original = [[float(v) for v in rng.standard_normal(3)], float(1 + rng.uniform())]
    phase([*common, "build", str(options), str(hdf5), json.dumps(mix_original), str(args.work / "original"), "tokens"])
    phase([*common, "run", str(args.work / "original"), str(OUT / "original-outputs.npz"), "original/"])
    record = {"seed": ORIGINAL_SEED, "weights_sha256": digest, "mix": mix_original, "options": ORIGINAL_OPTIONS}
    (OUT / "original.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
