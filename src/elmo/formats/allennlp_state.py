"""`Elmo` state_dicts in AllenNLP's keys and layouts, so checkpoints move between the two packages.

The biLM keeps its weights in the original file's layout (TensorFlow orientation, gate order
i, j, f, o, forget bias +1 applied at run time, highway gate that lets the transformed value
through; doc sections 3.2, 4.3, 4.5): that keeps weights.hdf5 exact. AllenNLP's modules store the
same numbers transposed, with the gates reordered to i, f, j, o, the +1 folded into the bias, the
highway gate negated and the character table with a zero row for padding (doc 3.2). `Elmo`
translates with the rules below when it saves and loads a state_dict.

Every rule is exact, bit for bit, except one float32 operation: AllenNLP's forget-gate bias is
B + 1 (as AllenNLP computes it from the file, and as our cell adds it at run time); reading it back
subtracts 1, which rounds for folded values below 0.5 (an error of at most half a unit in the last
place of the bias, far below the 1e-6 the outputs are checked at).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from elmo.model.bilm import BiLM, LstmLayer
from elmo.model.chars import N_CODES

Tensors = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Rule:
    """Our keys <-> AllenNLP's keys (both relative to the `Elmo`), with the two exact conversions."""

    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    to_theirs: Callable[..., Tensors]
    to_ours: Callable[..., Tensors]


def _same(*tensors: torch.Tensor) -> Tensors:
    return tensors


def _gates_swapped(t: torch.Tensor, cell_dim: int) -> torch.Tensor:
    """Blocks (i, j, f, o) <-> (i, f, j, o) along dim 0; the swap is its own inverse."""
    i, a, b, o = t.split(cell_dim, dim=0)
    return torch.cat([i, b, a, o], dim=0)


def _char_table_rules(bilm: BiLM, base: str, theirs: str) -> list[Rule]:
    stored_rows = bilm.char_encoder.char_embed.shape[0]
    byte_codes = bilm.config.token_input is None  # a lexicon model's table has no padding row to add

    def to_theirs(table: torch.Tensor) -> Tensors:  # AllenNLP always keeps the zero row for id 0
        if byte_codes and stored_rows == N_CODES:
            table = torch.cat([table.new_zeros(1, table.shape[1]), table])
        return (table,)

    def to_ours(table: torch.Tensor) -> Tensors:  # row 0 is only ever looked up for padding
        return (table[1:] if byte_codes and stored_rows == N_CODES and table.shape[0] == N_CODES + 1 else table,)

    return [Rule((f"{base}char_embed",), (f"{theirs}_char_embedding_weights",), to_theirs, to_ours)]


def _cnn_rules(bilm: BiLM, base: str, theirs: str) -> list[Rule]:
    """Convolutions (Conv1d weight (n, d, w) = ours (w, d, n) permuted), highways, projection."""
    enc = bilm.char_encoder
    rules = []
    for i in range(len(enc.conv_weights)):
        rules.append(Rule((f"{base}conv_weights.{i}",), (f"{theirs}char_conv_{i}.weight",),
                          lambda w: (w.permute(2, 1, 0),), lambda w: (w.permute(2, 1, 0),)))
        rules.append(Rule((f"{base}conv_biases.{i}",), (f"{theirs}char_conv_{i}.bias",), _same, _same))
    nf = bilm.config.n_filters
    for k in range(bilm.config.n_highway):
        # AllenNLP: [A; G] = h W^T + b, out = g' h + (1 - g') relu(A) with g' = 1 - our gate, so
        # G holds the negated carry (gate) weights (doc 4.3).
        rules.append(Rule(
            (f"{base}highway_transform_w.{k}", f"{base}highway_carry_w.{k}"),
            (f"{theirs}_highways._layers.{k}.weight",),
            lambda wt, wc: (torch.cat([wt.t(), -wc.t()]),),
            lambda w, nf=nf: (w[:nf].t(), -w[nf:].t())))
        rules.append(Rule(
            (f"{base}highway_transform_b.{k}", f"{base}highway_carry_b.{k}"),
            (f"{theirs}_highways._layers.{k}.bias",),
            lambda bt, bc: (torch.cat([bt, -bc]),),
            lambda b, nf=nf: (b[:nf], -b[nf:])))
    if enc.proj_w is not None:
        rules.append(Rule((f"{base}proj_w",), (f"{theirs}_projection.weight",), lambda w: (w.t(),), lambda w: (w.t(),)))
        rules.append(Rule((f"{base}proj_b",), (f"{theirs}_projection.bias",), _same, _same))
    return rules


def _lstm_rules(layer: LstmLayer, base: str, theirs: str) -> list[Rule]:
    """TF's W_0 (in + P, 4H) i|j|f|o and B without the forget +1 <-> AllenNLP's LstmCellWithProjection."""
    n_in, cell = layer.input_dim, layer.cell_dim
    forget_one = torch.zeros(4 * cell)
    forget_one[2 * cell : 3 * cell] = 1.0

    def w_to_theirs(w: torch.Tensor) -> Tensors:
        return _gates_swapped(w[:n_in].t(), cell), _gates_swapped(w[n_in:].t(), cell)

    def w_to_ours(w_input: torch.Tensor, w_state: torch.Tensor) -> Tensors:
        return (torch.cat([_gates_swapped(w_input, cell).t(), _gates_swapped(w_state, cell).t()]),)

    rules = [
        Rule((f"{base}W_0",), (f"{theirs}input_linearity.weight", f"{theirs}state_linearity.weight"),
             w_to_theirs, w_to_ours),
        Rule((f"{base}B",), (f"{theirs}state_linearity.bias",),
             lambda b: (_gates_swapped(b + forget_one.to(b), cell),),
             lambda b: (_gates_swapped(b, cell) - forget_one.to(b),)),
    ]
    if layer.W_P_0 is not None:
        rules.append(Rule((f"{base}W_P_0",), (f"{theirs}state_projection.weight",), lambda w: (w.t(),), lambda w: (w.t(),)))
    return rules


def token_embedder_rules(bilm: BiLM, ours: str, theirs: str) -> list[Rule]:
    """The character table (when the model reads characters), convolutions, highways and projection:
    the biLM's keys under `ours`, AllenNLP's `_ElmoCharacterEncoder` keys under `theirs`."""
    rules = _char_table_rules(bilm, f"{ours}char_encoder.", theirs) if bilm.config.reads_chars else []
    return rules + _cnn_rules(bilm, f"{ours}char_encoder.", theirs)


def encoder_rules(bilm: BiLM, ours: str, theirs: str) -> list[Rule]:
    """Every LSTM layer of both directions, AllenNLP's `ElmoLstm` keys under `theirs`."""
    rules = []
    for k, (fwd, bwd) in enumerate(zip(bilm.forward_lstm.layers, bilm.backward_lstm.layers)):
        rules += _lstm_rules(fwd, f"{ours}forward_lstm.layers.{k}.", f"{theirs}forward_layer_{k}.")
        rules += _lstm_rules(bwd, f"{ours}backward_lstm.layers.{k}.", f"{theirs}backward_layer_{k}.")
    return rules


def elmo_rules(bilm: BiLM, has_word_cache: bool) -> list[Rule]:
    """All conversions between `Elmo`'s biLM (and word cache) and AllenNLP `Elmo`'s state_dict keys,
    in AllenNLP's key order. The scalar mixes need none: `Elmo` registers them under AllenNLP's names."""
    rules = token_embedder_rules(bilm, "_elmo_lstm.", "_elmo_lstm._token_embedder.")
    if has_word_cache:
        rules.append(Rule(("_word_cache",), ("_elmo_lstm._word_embedding.weight",), _same, _same))
    return rules + encoder_rules(bilm, "_elmo_lstm.", "_elmo_lstm._elmo_lstm.")


def to_allennlp(state: dict, prefix: str, rules: list[Rule]) -> None:
    """Rewrite our keys under `prefix` of a state_dict in place into AllenNLP's, in AllenNLP's order.

    The converted entries come first, then the keys no rule covers (the scalar mixes, already in
    AllenNLP's names). Only the entries under `prefix` move, and they stay together, so a parent
    module's other entries keep their place.
    """
    entries = {k: state.pop(k) for k in [k for k in state if k.startswith(prefix)]}
    for rule in rules:
        if not all(prefix + o in entries for o in rule.ours):
            continue
        converted = rule.to_theirs(*(entries.pop(prefix + o).detach() for o in rule.ours))
        for name, tensor in zip(rule.theirs, converted):
            state[prefix + name] = tensor.contiguous()
    state.update(entries)


def from_allennlp(state: dict, prefix: str, rules: list[Rule], expected: dict[str, torch.Size],
                  error_msgs: list[str]) -> None:
    """Rewrite AllenNLP's keys under `prefix` in place into ours, for `load_state_dict`.

    `expected`: AllenNLP's shape for each of its keys, from this model. A key of the wrong shape is
    reported the way torch reports a size mismatch (and loading then fails); a rule whose keys are
    not all present is left alone, so torch names the missing and unexpected keys.
    """
    for rule in rules:
        keys = [prefix + t for t in rule.theirs]
        if not all(k in state for k in keys):
            continue
        wrong = [(t, state[k].shape) for t, k in zip(rule.theirs, keys) if state[k].shape != expected[t]]
        values = [state.pop(k) for k in keys]
        if wrong:
            for t, shape in wrong:
                error_msgs.append(f"size mismatch for {prefix}{t}: copying a param with shape {tuple(shape)} from "
                                  f"checkpoint, the shape in current model is {tuple(expected[t])}.")
            continue
        for name, tensor in zip(rule.ours, rule.to_ours(*values)):
            state[prefix + name] = tensor


def allennlp_shapes(rules: list[Rule], params: dict[str, torch.Tensor]) -> dict[str, torch.Size]:
    """AllenNLP's shape for each of its keys, by running the conversions on shape-only (meta) tensors."""
    shapes = {}
    for rule in rules:
        meta = [torch.empty(params[o].shape, device="meta") for o in rule.ours]
        for name, tensor in zip(rule.theirs, rule.to_theirs(*meta)):
            shapes[name] = tensor.shape
    return shapes
