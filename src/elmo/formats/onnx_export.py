"""A loaded biLM as one ONNX graph (`elmo export-onnx`): stateless, for ONNX Runtime and what runs on it.

The graph computes what `Embedder.embed_batch` computes for a stateless biLM (docs/format.md 4.1-4.7),
written for a graph runtime rather than copied from bilm.py's fast paths: every token of the padded
batch goes through the char CNN (a Conv per filter width, then the maximum over positions), the
sentence markers are added by position masks, the backward direction reads each row reversed within
its own length (a gather), and each LSTM layer is an ONNX `Scan` over the time steps whose body is
one TensorFlow LSTM cell with projection and clipping. Steps past a row's end are computed and masked
out: they come after the row's last real step in both directions, so they never feed a real one.

Input `char_ids` (batch, tokens, ids_width) int64: `elmo.batch_to_ids` (or the model's lexicon's ids,
ManyLangs), 0 rows for padding on the right (a hole or left padding gives wrong vectors: the file's
metadata says so), no markers; an id outside the table (negative, or past its last row) fails the
run in its Gather. Outputs `layers` (batch, layers, tokens, dim) float32 with
zeros at padding, and `mask` (batch, tokens) bool. Batch and length are dynamic.

What it cannot do: carry LSTM state from one call to the next (bilm-tf's stateful mode, doc 4.8);
every row starts from zero state, as `Embedder` does by default. `int8=True` quantizes the float
graph's matrix products with ONNX Runtime's dynamic quantization. The files, their metadata and the
check after export: `onnx_files`.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Sequence

import numpy as np
import torch

from elmo.errors import InputError
from elmo.files.fileio import atomic_files
from elmo.files.output_paths import check_output_kind
from elmo.model.bilm import BiLM

from .onnx_files import EXTERNAL_DATA_BYTES, check_graph, metadata, onnx_module, quantize_int8, save_model, stamp

OPSET = 17
INPUT, LAYERS_OUTPUT, MASK_OUTPUT = "char_ids", "layers", "mask"


class GraphBuilder:
    """Nodes and initializers of one ONNX graph, each output named in order (`op` returns the name)."""

    def __init__(self, prefix: str):
        self.onnx = onnx_module()
        self.prefix = prefix
        self.nodes: list = []
        self.initializers: list = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{self.prefix}{hint}_{self._count}"

    def const(self, value, hint: str = "c", dtype=np.float32) -> str:
        array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        name = self.name(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.array(array, dtype=dtype, order="C"), name))
        return name

    def ints(self, values: Sequence[int], hint: str = "i") -> str:
        return self.const(np.asarray(values), hint, np.int64)

    def op(self, op_type: str, *inputs: str, outputs: int = 1, named: str | None = None, **attrs) -> str | list[str]:
        """One node; its output names are fresh, or `named` (a graph output)."""
        names = [named] if named else [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), names, **attrs))
        return names[0] if outputs == 1 else names

    def linear(self, x: str, weight: torch.Tensor, bias: torch.Tensor | None = None) -> str:
        """x @ weight (+ bias): MatMul then Add, the pattern ONNX Runtime's quantizer converts."""
        y = self.op("MatMul", x, self.const(weight, "w"))
        return y if bias is None else self.op("Add", y, self.const(bias, "b"))


def char_encoder_graph(g: GraphBuilder, bilm: BiLM, flat_ids: str) -> str:
    """ids (N, ids_width) -> token vectors (N, P): `CharEncoder._encode` for every row."""
    enc, config = bilm.char_encoder, bilm.config
    features = []
    chars = flat_ids
    if enc.word_embed is not None:  # ManyLangs: word id (stored +1; 0 = no word) then character ids
        word = g.op("Gather", flat_ids, g.ints(0), axis=1)
        word = refuse_negative(g, word, g.op("Max", g.op("Sub", word, g.ints(1)), g.ints(0)), enc.word_embed.shape[0])
        features.append(g.op("Gather", g.const(enc.word_embed, "word_embed"), word, axis=0))
        chars = g.op("Slice", flat_ids, g.ints([1]), g.ints([config.ids_width]), g.ints([1])) if config.reads_chars else None
    if chars is not None:
        h = g.op("Concat", *char_cnn_maxima(g, enc, chars), axis=1)
        h = g.op("Relu" if config.activation == "relu" else "Tanh", h)
        n = config.n_filters
        for k in range(config.n_highway):  # carry and transform as one product, as elmo.model.int8 does
            both = g.linear(h, torch.cat([enc.highway_carry_w[k], enc.highway_transform_w[k]], dim=1),
                            torch.cat([enc.highway_carry_b[k], enc.highway_transform_b[k]]))
            carry, transform = g.op("Split", both, g.ints([n, n]), outputs=2, axis=1)
            gate, transform = g.op("Sigmoid", carry), g.op("Relu", transform)
            h = g.op("Add", g.op("Mul", gate, transform), g.op("Mul", g.op("Sub", g.const(1.0), gate), h))
        features.append(h)
    h = g.op("Concat", *features, axis=1) if len(features) > 1 else features[0]
    return g.linear(h, enc.proj_w, enc.proj_b) if enc.proj_w is not None else h


def refuse_negative(g: GraphBuilder, ids: str, index: str, rows: int) -> str:
    """`index` for a Gather from a table of `rows` rows, with every place where `ids` is negative moved
    below -rows: Gather refuses it there as it refuses an index >= rows, where a negative index in
    range would silently read a row from the end (-1: the last)."""
    return g.op("Where", g.op("Less", ids, g.ints(0)), g.op("Sub", ids, g.ints(rows + 1)), index)


def char_cnn_maxima(g: GraphBuilder, enc, chars: str) -> list[str]:
    """Each filter's maximum over positions (N, n) per width, as `CharEncoder.filter_maxima`: only the
    windows that start before the longest real token's padding run (the batch's padding tokens, all 0,
    do not count), and where windows were cut, the one all-padding window's value, the same for all."""
    table = enc.embedding_table()
    length = enc.config.ids_width - (1 if enc.word_embed is not None else 0)
    looked_up = g.op("Gather", g.const(table, "char_embed"), refuse_negative(g, chars, chars, table.shape[0]), axis=0)
    x = g.op("Transpose", looked_up, perm=[0, 2, 1])  # (N, d, C)
    is_code = g.op("Cast", g.op("Not", g.op("Equal", chars, g.ints(enc.pad_id))), to=1)
    row_extent = g.op("ReduceMax", g.op("Mul", is_code, g.const(np.arange(1, length + 1))), axes=[1], keepdims=0)
    real = g.op("ReduceMax", g.op("Cast", g.op("Greater", chars, g.ints(0)), to=1), axes=[1], keepdims=0)
    extent = g.op("ReduceMax", g.op("Mul", row_extent, real), axes=[0], keepdims=1)  # (1,), float
    maxima = []
    for w, b in zip(enc.conv_weights, enc.conv_biases):  # ours (width, d, n) -> Conv's (n, d, width)
        width, d, n_out = w.shape
        windows = length - width + 1
        starts = g.op("Max", g.op("Min", extent, g.const([float(windows)])), g.const([1.0]))
        end = g.op("Cast", g.op("Add", starts, g.const([float(width - 1)])), to=7)
        y = g.op("Conv", g.op("Slice", x, g.ints([0]), end, g.ints([2])), g.const(w.permute(2, 1, 0), "conv_w"),
                 g.const(b, "conv_b"))
        best = g.op("ReduceMax", y, axes=[2], keepdims=0)
        padding = torch.addmm(b.unsqueeze(0), table[enc.pad_id].repeat(width).unsqueeze(0), w.reshape(width * d, n_out))
        cut = g.op("Less", starts, g.const([float(windows)]))
        floor = g.op("Where", cut, g.const(padding), g.const(np.full((1, n_out), -np.inf)))
        maxima.append(g.op("Max", best, floor))
    return maxima


def lstm_cell_body(layer, onnx) -> object:
    """The Scan body: state (c, h) and this step's input products -> new (c, h) and the output h."""
    g = GraphBuilder(f"cell{id(layer)}_")
    c_prev, h_prev, pre = "c_prev", "h_prev", "pre"
    w_h = layer.W_0[layer.input_dim :]
    gates = g.op("Add", pre, g.op("MatMul", h_prev, g.const(w_h, "w_h")))
    i, j, f, o = g.op("Split", gates, outputs=4, axis=1)
    c = g.op("Add", g.op("Mul", g.op("Sigmoid", f), c_prev), g.op("Mul", g.op("Sigmoid", i), g.op("Tanh", j)))
    if layer.cell_clip is not None:
        c = g.op("Clip", c, g.const(-layer.cell_clip), g.const(layer.cell_clip))
    h = g.op("Mul", g.op("Sigmoid", o), g.op("Tanh", c))
    if layer.W_P_0 is not None:
        h = g.op("MatMul", h, g.const(layer.W_P_0, "w_p"))
        if layer.proj_clip is not None:
            h = g.op("Clip", h, g.const(-layer.proj_clip), g.const(layer.proj_clip))
    for value, name in ((c, "c_next"), (h, "h_next"), (h, "y")):
        g.op("Identity", value, named=name)
    def value(name: str, dim: int):  # shapes declared: ONNX Runtime 1.15 and 1.16 refuse a body without them
        return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["rows", dim])

    cell, out = layer.cell_dim, layer.out_dim
    return onnx.helper.make_graph(
        g.nodes, f"lstm_cell_{id(layer)}", [value(c_prev, cell), value(h_prev, out), value(pre, 4 * cell)],
        [value("c_next", cell), value("h_next", out), value("y", out)], g.initializers)


def lstm_stack_graph(g: GraphBuilder, stack, x_tm: str, rows: str) -> list[str]:
    """One direction's stack over time-major input (T, B, P) -> each layer's output (T, B, P)."""
    onnx = g.onnx
    outputs, inp = [], x_tm
    for k, layer in enumerate(stack.layers):
        pre = g.linear(inp, layer.W_0[: layer.input_dim], layer.B + layer._forget_one())  # all steps at once
        c0 = g.op("ConstantOfShape", g.op("Concat", rows, g.ints([layer.cell_dim]), axis=0),
                  value=onnx.helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0]))
        h0 = g.op("ConstantOfShape", g.op("Concat", rows, g.ints([layer.out_dim]), axis=0),
                  value=onnx.helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0]))
        _, _, out = g.op("Scan", c0, h0, pre, outputs=3, num_scan_inputs=1, body=lstm_cell_body(layer, onnx))
        if k > 0 and stack.config.use_skip_connections:
            out = g.op("Add", out, inp)
        outputs.append(out)
        inp = out
    return outputs


def build_model(bilm: BiLM):
    """The float32 ONNX model of a stateless `bilm` (on the CPU, float32; int8 conversions are ignored:
    the graph reads the float32 parameters, so a biLM loaded for int8 only is refused)."""
    onnx = onnx_module()
    if getattr(bilm, "float32_released", False):
        raise InputError("ONNX export reads the float32 weights, and this biLM was loaded for int8 inference only "
                         "(int8=True); load the model without int8 (elmo export-onnx --int8 quantizes the graph)")
    if bilm.stateful:
        raise InputError("ONNX export is stateless: load the model without stateful=True (the graph cannot carry "
                         "LSTM state between calls)")
    g = GraphBuilder("")
    config = bilm.config
    with torch.no_grad():
        shape = g.op("Shape", INPUT)
        batch, given = g.op("Slice", shape, g.ints([0]), g.ints([1])), g.op("Slice", shape, g.ints([1]), g.ints([2]))
        ids = g.op("Pad", INPUT, g.ints([0, 0, 0, 0, 1, 0]))  # one padding token more: never 0 tokens
        steps = g.op("Add", given, g.ints([1]))
        present = g.op("Cast", g.op("Greater", ids, g.ints(0)), to=onnx.TensorProto.FLOAT)
        mask = g.op("ReduceMax", present, axes=[2], keepdims=0)  # (B, T) 1.0 for a token
        flat = g.op("Reshape", ids, g.ints([-1, config.ids_width]))
        # each distinct token once (padding rows are one), as bilm.token_vectors does
        unique, _, inverse, _ = g.op("Unique", flat, outputs=4, axis=0, sorted=0)
        tokens = g.op("Gather", char_encoder_graph(g, bilm, unique), inverse, axis=0)
        tokens = g.op("Reshape", tokens, g.op("Concat", batch, steps, g.ints([config.projection_dim]), axis=0))
        tokens = g.op("Mul", tokens, g.op("Unsqueeze", mask, g.ints([2])))
        x, rev = _with_markers(g, bilm, tokens, mask, steps)
        x_tm = g.op("Transpose", x, perm=[1, 0, 2])
        x_rev_tm = g.op("Transpose", g.op("GatherElements", x, _expand_index(g, rev, x), axis=1), perm=[1, 0, 2])
        layers = [g.op("Concat", x, x, axis=2)]
        fwd = lstm_stack_graph(g, bilm.forward_lstm, x_tm, batch)
        bwd = lstm_stack_graph(g, bilm.backward_lstm, x_rev_tm, batch)
        for f_tm, b_tm in zip(fwd, bwd):
            b = g.op("Transpose", b_tm, perm=[1, 0, 2])
            b = g.op("GatherElements", b, _expand_index(g, rev, b), axis=1)
            layers.append(g.op("Concat", g.op("Transpose", f_tm, perm=[1, 0, 2]), b, axis=2))
        stacked = g.op("Concat", *[g.op("Unsqueeze", layer, g.ints([1])) for layer in layers], axis=1)
        # the given tokens only: no markers, not the added padding token; (B, L+1, T, 2P)
        inner = g.op("Slice", stacked, g.ints([1]), steps, g.ints([2]))
        mask = g.op("Slice", mask, g.ints([0]), given, g.ints([1]))
        g.op("Mul", inner, g.op("Unsqueeze", mask, g.ints([1, 3])), named=LAYERS_OUTPUT)
        g.op("Cast", mask, named=MASK_OUTPUT, to=onnx.TensorProto.BOOL)
    vi = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        g.nodes, "elmo_bilm",
        [vi(INPUT, onnx.TensorProto.INT64, ["batch", "tokens", config.ids_width])],
        [vi(LAYERS_OUTPUT, onnx.TensorProto.FLOAT, ["batch", bilm.num_layers, "tokens", config.output_dim]),
         vi(MASK_OUTPUT, onnx.TensorProto.BOOL, ["batch", "tokens"])], g.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="elmo", doc_string="ELMo biLM, stateless: elmo export-onnx")
    model.ir_version = 8  # ONNX Runtime reads IR 8 back to its 1.14 release (checked when saved: onnx_files.save_model)
    return model


def _with_markers(g: GraphBuilder, bilm: BiLM, tokens: str, mask: str, steps: str) -> tuple[str, str]:
    """Token vectors (B, T, P) -> with <S> first and </S> after each row's last token (B, T+2, P), and
    the index reversing each row within its length, markers included (B, T+2), as bilm.py does."""
    bos, eos = bilm.boundary_vectors()
    padded = g.op("Pad", tokens, g.ints([0, 1, 0, 0, 1, 0]))
    positions = g.op("Range", g.const(0.0), g.op("Cast", g.op("Add", steps, g.ints([2])), to=1), g.const(1.0))
    lengths = g.op("ReduceSum", mask, g.ints([1]), keepdims=1)  # (B, 1): tokens per row
    is_bos = g.op("Cast", g.op("Equal", positions, g.const(0.0)), to=1)
    is_eos = g.op("Cast", g.op("Equal", g.op("Unsqueeze", positions, g.ints([0])),
                               g.op("Add", lengths, g.const(1.0))), to=1)  # (B, T+2)
    x = g.op("Add", padded, g.op("Mul", g.op("Unsqueeze", is_bos, g.ints([0, 2])), g.const(bos.view(1, 1, -1))))
    x = g.op("Add", x, g.op("Mul", g.op("Unsqueeze", is_eos, g.ints([2])), g.const(eos.view(1, 1, -1))))
    full = g.op("Add", lengths, g.const(2.0))
    backwards = g.op("Sub", g.op("Sub", full, g.const(1.0)), positions)  # (B, T+2): len-1-t
    rev = g.op("Where", g.op("Less", backwards, g.const(0.0)), g.op("Expand", positions, g.op("Shape", backwards)),
               backwards)
    return x, g.op("Cast", rev, to=7)  # 7: INT64


def _expand_index(g: GraphBuilder, index: str, like: str) -> str:
    """(B, T) -> (B, T, D) of `like`'s shape, for GatherElements along the time axis."""
    return g.op("Expand", g.op("Unsqueeze", index, g.ints([2])), g.op("Shape", like))


def export_onnx(bilm: BiLM, path: str | os.PathLike, int8: bool = False, check: bool = True,
                reference: str | os.PathLike | None = None, external_data_threshold: int = EXTERNAL_DATA_BYTES) -> str:
    """Write `bilm` as one ONNX file at `path`, carrying its metadata (`onnx_files.metadata`; `reference`:
    the model reference it was loaded from); its tensors go to `path`.data beside it when they pass
    `external_data_threshold` bytes (ONNX Runtime reads them from there). Written in a folder beside
    `path` and renamed; with `check`, first run in ONNX Runtime against `bilm` (`onnx_files.check_graph`).
    Returns what the check measured ("" without it)."""
    onnx = onnx_module()
    path = os.fspath(path)
    check_output_kind(path)
    model = build_model(bilm.cpu().float())
    meta = metadata(bilm, reference, int8)
    stamp(model, meta)
    name, measured = os.path.basename(path), ""
    with atomic_files(path) as folder:
        target = os.path.join(folder, name)
        if int8:
            os.mkdir(os.path.join(folder, "float32"))
            float_path = os.path.join(folder, "float32", name)
            external = len(save_model(model, float_path, external_data_threshold)) > 1
            del model
            quantize_int8(float_path, target, external)
            shutil.rmtree(os.path.join(folder, "float32"))
            quantized = onnx.load(target)
            stamp(quantized, meta)  # the quantizer names itself the producer and may drop metadata
            os.remove(target)
            for stale in glob.glob(glob.escape(target) + "*"):
                os.remove(stale)
            written = save_model(quantized, target, external_data_threshold)
        else:
            written = save_model(model, target, external_data_threshold)
        if check:
            measured = check_graph(target, bilm, int8, path)
    if len(written) == 1 and os.path.isfile(path + ".data"):
        os.remove(path + ".data")  # an earlier export's tensors, which this file does not read
    return measured
