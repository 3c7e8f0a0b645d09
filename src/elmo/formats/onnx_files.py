"""The exported graph as files (`elmo export-onnx`): what it says about itself, past 2 GB, int8, and checked.

`metadata` is what the file carries in `metadata_props` (the model, its weights' fingerprint, options,
layers and dim, the input convention, the package version, int8's settings): a file found on a disk
says what it is. `save_model` writes external data (`OUT.onnx.data` beside it) when the tensors pass
`EXTERNAL_DATA_BYTES`, below protobuf's 2 GB limit on one message. `quantize_int8` runs ONNX Runtime's
dynamic quantization. `check_graph` runs the written file in ONNX Runtime against the PyTorch model
before the file gets its name, so a graph that computes something else is never left behind.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
from pathlib import Path

import numpy as np
import torch

from elmo.errors import InputError, OutputError
from elmo.model.bilm import BiLM
from elmo.model.boundaries import remove_sentence_boundaries

EXTERNAL_DATA_BYTES = 2**31 - 2**26  # protobuf refuses a message of 2 GiB; 64 MiB left for the graph itself
INT8_SETTINGS = {"method": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8", "per_channel": True,
                 "reduce_range": True, "op_types_to_quantize": ["MatMul"], "extra_options": {"EnableSubgraph": True},
                 "activations": "uint8, one scale per tensor, computed per call"}
PADDING = ("right: each row's tokens first, then rows of 0; a row of 0 between tokens (a hole) or before them (left "
           "padding) gives wrong vectors")
UTF8_IDS = ("per token 50 int64 ids: 259 (begin of word), the token's UTF-8 bytes + 1 (at most 48 bytes), 260 (end "
            "of word), then 261 up to 50; a token spelled <S> or </S> gets 259, 257 or 258, 260, then 261; no "
            "sentence markers (the graph adds them); made by elmo_char_ids.batch_to_ids (numpy only) or "
            "elmo.batch_to_ids")
CHECK_SENTENCES = [["The", "bank", "raised", "interest", "rates", "."], ["Hello"], ["a•", "ünïcödé", "x" * 70, "日本語"],
                   "We sat on the bank of the river and watched the water for a long while .".split()]
FLOAT_TOLERANCE = 1e-4  # of the largest magnitude; the graph is measured within 1e-6 (tests/test_onnx.py)
INT8_MIN_MEAN_COSINE = 0.99  # per layer; measured 0.9996-0.9998 on 1,000 lines (docs/performance.md)



def package_version() -> str:
    """This package's version as installed (the one `elmo.__version__` names), read without importing the package
    face, which sits above elmo.formats."""
    try:
        return importlib.metadata.version("elmo-bilm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"

def onnx_module():
    try:
        import onnx
    except ImportError as e:
        raise InputError("ONNX export needs the onnx package: pip install 'elmo-bilm[onnx]'") from e
    return onnx


def model_label(reference: str | os.PathLike | None) -> str:
    """The model as the file records it: a name or URL as given, a local path by its last part only (the
    exporting machine's folders are nobody's business)."""
    if reference is None:
        return "unknown (exported through the Python API without a model reference)"
    text = os.fspath(reference)
    if os.path.exists(text):
        return f"{Path(text).resolve().name} (a local model folder or file)"
    return text


def input_convention(bilm: BiLM) -> str:
    """How to make `char_ids` for this model: the UTF-8 rule, or the lexicon files a ManyLangs model needs."""
    lexicon = bilm.lexicon
    if lexicon is None:
        return UTF8_IDS
    parts = [name for name, table in (("word.dic", getattr(lexicon, "words", None)),
                                      ("char.dic", getattr(lexicon, "chars", None))) if table is not None]
    return (f"ELMoForManyLangs ids, {bilm.config.ids_width} per token (a word id first when the model reads "
            f"words): the model folder's {' and '.join(parts)} are needed to make them (bilm.batch_to_ids of "
            "elmo.load_model on that folder); rows of 0 for padding, no sentence markers")


def metadata(bilm: BiLM, reference: str | os.PathLike | None, int8: bool) -> dict[str, str]:
    """What the file says about itself (`metadata_props`, all strings)."""
    __version__ = package_version()
    from .fingerprints import model_fingerprint

    config = bilm.config
    options = config.to_options() if config.token_input is None else {"token_input": repr(config.token_input),
                                                                        "architecture": repr(config)}
    meta = {"elmo.model": model_label(reference), "elmo.weights_sha256": model_fingerprint(bilm),
            "elmo.options": json.dumps(options, sort_keys=True), "elmo.layers": str(bilm.num_layers),
            "elmo.dim": str(bilm.output_dim()), "elmo.input.char_ids": input_convention(bilm),
            "elmo.input.padding": PADDING, "elmo.version": __version__, "elmo.precision": "int8" if int8 else "float32"}
    if int8:
        meta["elmo.int8"] = json.dumps(INT8_SETTINGS, sort_keys=True)
    return meta


def stamp(model, meta: dict[str, str]) -> None:
    """Set producer and `metadata_props` (replacing earlier ones of the same keys)."""
    __version__ = package_version()

    model.producer_name, model.producer_version = "elmo", __version__
    kept = [(p.key, p.value) for p in model.metadata_props if p.key not in meta]
    del model.metadata_props[:]
    for key, value in [*kept, *meta.items()]:
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def tensor_bytes(graph) -> int:
    """Bytes of every initializer of `graph` and its subgraphs (the Scan bodies)."""
    total = sum(len(t.raw_data) or t.ByteSize() for t in graph.initializer)
    for node in graph.node:
        total += sum(tensor_bytes(a.g) for a in node.attribute if a.HasField("g"))
    return total


def save_model(model, path: str, threshold: int = EXTERNAL_DATA_BYTES) -> list[str]:
    """Write `model` at `path`; its tensors in `path`.data beside it if they pass `threshold` bytes. Checks
    the written file (onnx.checker, by path: it reads external data too). Returns the files written."""
    onnx = onnx_module()
    external = tensor_bytes(model.graph) > threshold
    data = path + ".data"
    if external:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(data), size_threshold=1024)
        os.chmod(data, os.stat(path).st_mode & 0o7777)  # onnx makes it private; the usual mode, as the graph's
    else:
        onnx.save_model(model, path)
    onnx.checker.check_model(path)
    return [path, data] if external else [path]


def quantize_int8(float_path: str, int8_path: str, external: bool) -> None:
    """ONNX Runtime's dynamic quantization of every MatMul (Scan bodies included): int8 weights per
    output channel, activations quantized per call (uint8, one scale per tensor, so a row's numbers
    depend a little on its batch). The CNN's Conv and the lookups stay float32. `reduce_range`: 7-bit
    weights, as ONNX Runtime advises for CPUs without VNNI, whose u8 x s8 sums saturate in int16."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        raise InputError("--int8 needs onnxruntime: pip install 'elmo-bilm[onnx]'") from e
    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # its advice to pre-process
    quantize_dynamic(float_path, int8_path, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                     op_types_to_quantize=["MatMul"], use_external_data_format=external,
                     extra_options={"EnableSubgraph": True})


def reference_layers(bilm: BiLM, sentences: list[list[str]]) -> np.ndarray:
    """The PyTorch model's layers for `sentences`, (B, layers, T, dim) as the graph gives them."""
    ids, training = bilm.batch_to_ids(sentences), bilm.training
    try:
        with torch.no_grad():
            out = bilm.eval()(ids)
            layers = [remove_sentence_boundaries(layer, out.mask)[0] for layer in out.layers]
    finally:
        bilm.train(training)
    return torch.stack(layers, dim=1).float().numpy()


def check_graph(path: str, bilm: BiLM, int8: bool, name: str) -> str:
    """Run the file in ONNX Runtime (CPU, one thread) on a few sentences against the PyTorch model; raise
    an `OutputError` if they differ (float32: more than 1e-4 of the largest value; int8: a layer's mean
    cosine under 0.99). Returns what was measured, for the command's message."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise InputError("the check after export runs the graph in ONNX Runtime: pip install 'elmo-bilm[onnx]', "
                         "or pass --no-check to skip it") from e
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    ids = bilm.batch_to_ids(CHECK_SENTENCES).numpy()
    got = session.run(None, {"char_ids": ids})[0]
    want = reference_layers(bilm, CHECK_SENTENCES)
    if int8:
        real = (ids > 0).any(-1)  # (B, T)
        g, w = got.transpose(0, 2, 1, 3)[real], want.transpose(0, 2, 1, 3)[real]  # (tokens, layers, dim)
        cosine = (g * w).sum(-1) / np.maximum(np.linalg.norm(g, axis=-1) * np.linalg.norm(w, axis=-1), 1e-12)
        worst = float(cosine.mean(0).min())
        if not worst >= INT8_MIN_MEAN_COSINE:
            raise OutputError(f"{name}: the int8 graph's vectors are far from the PyTorch model's (a layer's mean "
                              f"cosine {worst:.4f}, expected >= {INT8_MIN_MEAN_COSINE}); nothing was written")
        return f"checked against PyTorch: lowest mean cosine of a layer {worst:.5f}"
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-12)
    diff = float(np.abs(got - want).max(initial=0.0))
    if not diff <= FLOAT_TOLERANCE * scale:
        raise OutputError(f"{name}: the graph's vectors differ from the PyTorch model's by {diff:.3g} (largest value "
                          f"{scale:.3g}, allowed {FLOAT_TOLERANCE:g} of it); nothing was written")
    return f"checked against PyTorch: largest difference {diff:.2g} (largest value {scale:.3g})"
