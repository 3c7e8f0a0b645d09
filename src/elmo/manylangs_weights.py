"""ELMoForManyLangs' token_embedder.pkl / encoder.pkl (torch state_dicts) -> this package's BiLM parameters.

Their names and layouts, and the exact translation (see docs/manylangs.md):

- `convolutions.{i}.weight` (n, d, w), a Conv1d -> `conv_weights[i]` (w, d, n).
- `highways._layers.{k}` (AllenNLP's Highway, 2F outputs): out = g' h + (1 - g') relu(A h), with
  the first F rows giving A and the last F the gate g'. Ours is g relu(T h) + (1 - g) h, so
  T = A and g = 1 - g' = sigmoid(-G): the carry weights are the negated gate rows.
- `projection` (nn.Linear over [word embedding; highway output]) -> `proj_w` = weight^T.
- `{forward,backward}_layer_{k}` (AllenNLP's LstmCellWithProjection): `input_linearity` (4H, in)
  and `state_linearity` (4H, P) + bias, gates i, f, g, o, the forget bias inside the stored bias;
  `state_projection` (P, H). Ours is TensorFlow's layout: W_0 = [W_in; W_state]^T with gate
  blocks i, j(=g), f, o, and B without the forget gate's +1 (added at run time).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .bilm import BiLM, CharEncoder, LstmLayer
from .errors import ModelFileError
from .manylangs import CHAR_DIC, ENCODER_PKL, TOKEN_EMBEDDER_PKL, WORD_DIC
from .torch_files import load_torch_file

Shapes = dict[str, tuple[int, ...]]


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A torch-saved state_dict, loaded with weights_only=True (tensors only: no code runs on load)."""
    state = load_torch_file(path, "a torch state_dict of ELMoForManyLangs (names -> tensors)")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelFileError(f"{path}: expected a state_dict (names -> tensors), found {type(state).__name__}")
    return state


def token_embedder_shapes(bilm: BiLM) -> Shapes:
    """Every tensor their ConvTokenEmbedder saves for this architecture, with its shape."""
    c, ti = bilm.config, bilm.config.token_input
    shapes: Shapes = {}
    if c.word_dim:
        shapes["word_emb_layer.embedding.weight"] = (ti.word_rows, c.word_dim)
    if c.reads_chars:
        shapes["char_emb_layer.embedding.weight"] = (ti.char_rows, c.char_dim)
        for i, (width, n) in enumerate(c.filters):
            shapes[f"convolutions.{i}.weight"] = (n, c.char_dim, width)
            shapes[f"convolutions.{i}.bias"] = (n,)
        for k in range(c.n_highway):
            shapes[f"highways._layers.{k}.weight"] = (2 * c.n_filters, c.n_filters)
            shapes[f"highways._layers.{k}.bias"] = (2 * c.n_filters,)
    shapes["projection.weight"] = (c.projection_dim, c.token_features)
    shapes["projection.bias"] = (c.projection_dim,)
    return shapes


def encoder_shapes(bilm: BiLM) -> Shapes:
    """Every tensor their ElmobiLm saves, with its shape: per layer and direction one LSTM cell."""
    c = bilm.config
    shapes: Shapes = {}
    for k in range(c.n_layers):
        for direction in ("forward", "backward"):
            p = f"{direction}_layer_{k}."
            shapes[p + "input_linearity.weight"] = (4 * c.dim, c.projection_dim)
            shapes[p + "state_linearity.weight"] = (4 * c.dim, c.projection_dim)
            shapes[p + "state_linearity.bias"] = (4 * c.dim,)
            shapes[p + "state_projection.weight"] = (c.projection_dim, c.dim)
    return shapes


def _shape_hint(name: str, directory: Path) -> str:
    """Where an expected shape comes from, for the tables sized by the dictionaries."""
    if name.startswith("char_emb_layer"):
        return f"; its rows are the entries of {directory / CHAR_DIC}: do the dictionaries and the weights belong together?"
    if name.startswith("word_emb_layer"):
        return f"; its rows are the entries of {directory / WORD_DIC}: do the dictionaries and the weights belong together?"
    return "; does the architecture JSON belong to these weights?"


def check_state(path: Path, state: dict[str, torch.Tensor], expected: Shapes, directory: Path) -> None:
    """Names and shapes must be exactly those the architecture and dictionaries call for."""
    missing = [name for name in expected if name not in state]
    if missing:
        raise ModelFileError(f"{path}: missing tensor '{missing[0]}' (expected shape {expected[missing[0]]})"
                             + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                             + _shape_hint(missing[0], directory))
    extra = sorted(set(state) - set(expected))
    if extra:
        raise ModelFileError(f"{path}: tensor '{extra[0]}' is not part of the model the architecture JSON describes"
                             + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    for name, shape in expected.items():
        tensor = state[name]
        if tuple(tensor.shape) != shape:
            raise ModelFileError(f"{path}: tensor '{name}' has shape {tuple(tensor.shape)}, expected {shape}"
                                 + _shape_hint(name, directory))
        if not tensor.is_floating_point() or not torch.isfinite(tensor).all():
            raise ModelFileError(f"{path}: tensor '{name}' must hold finite floats, found dtype {tensor.dtype}"
                                 + ("" if not tensor.is_floating_point() else " with NaN or infinite values"))


@torch.no_grad()
def fill_token_encoder(enc: CharEncoder, state: dict[str, torch.Tensor]) -> None:
    c = enc.config
    if enc.word_embed is not None:
        enc.word_embed.copy_(state["word_emb_layer.embedding.weight"])
    if c.reads_chars:
        enc.char_embed.copy_(state["char_emb_layer.embedding.weight"])
        for i, (w, b) in enumerate(zip(enc.conv_weights, enc.conv_biases)):
            w.copy_(state[f"convolutions.{i}.weight"].permute(2, 1, 0))
            b.copy_(state[f"convolutions.{i}.bias"])
        nf = c.n_filters
        for k in range(c.n_highway):
            weight, bias = state[f"highways._layers.{k}.weight"], state[f"highways._layers.{k}.bias"]
            enc.highway_transform_w[k].copy_(weight[:nf].t())
            enc.highway_transform_b[k].copy_(bias[:nf])
            enc.highway_carry_w[k].copy_(-weight[nf:].t())
            enc.highway_carry_b[k].copy_(-bias[nf:])
    enc.proj_w.copy_(state["projection.weight"].t())
    enc.proj_b.copy_(state["projection.bias"])


@torch.no_grad()
def fill_lstm_layer(layer: LstmLayer, state: dict[str, torch.Tensor], prefix: str) -> None:
    h = layer.cell_dim
    blocks = torch.arange(4 * h).view(4, h)
    to_ours = torch.cat([blocks[0], blocks[2], blocks[1], blocks[3]])  # i, f, g, o -> i, j, f, o
    weight = torch.cat([state[prefix + "input_linearity.weight"], state[prefix + "state_linearity.weight"]], dim=1)
    layer.W_0.copy_(weight[to_ours].t())
    bias = state[prefix + "state_linearity.bias"][to_ours].clone()
    bias[2 * h : 3 * h] -= 1.0  # ours adds the forget bias of 1 at run time
    layer.B.copy_(bias)
    layer.W_P_0.copy_(state[prefix + "state_projection.weight"].t())


def fill_weights(bilm: BiLM, token_state: dict, encoder_state: dict, directory: Path) -> None:
    """Check both state_dicts against the architecture and dictionaries, then copy them in."""
    check_state(directory / TOKEN_EMBEDDER_PKL, token_state, token_embedder_shapes(bilm), directory)
    check_state(directory / ENCODER_PKL, encoder_state, encoder_shapes(bilm), directory)
    fill_token_encoder(bilm.char_encoder, token_state)
    for direction, stack in (("forward", bilm.forward_lstm), ("backward", bilm.backward_lstm)):
        for k, layer in enumerate(stack.layers):
            fill_lstm_layer(layer, encoder_state, f"{direction}_layer_{k}.")
