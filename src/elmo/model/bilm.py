"""The biLM as plain torch modules: character encoder, LSTM stacks with projection, both directions.

Parameters are kept in the original file's layout and conventions (TensorFlow orientation `x @ W`,
gate order i, j, f, o, forget bias +1 applied at run time), so loading and saving are copies and a
saved model reloads bit for bit. Doc sections 4.1-4.8 give the math this file follows; the same
math written plainly (a loop over every padded step, no sorting or caching), which the tests hold
every fast path here to, is tests/reference.py.

Beside it, each in its own module: the LSTM's matrix-product kernels (lstm_kernels.py, shared with
int8.py), the memo of token vectors (token_cache.py) and the stateful mode's rows (row_states.py);
names that lived here still import from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from elmo.errors import InputError

from .allocator import check_fits_memory
from .boundaries import add_sentence_boundaries, join_directions, reverse_index
from .chars import BOS_IDS, EOS_IDS, N_CODES, PAD_CHAR, Lexicon, batch_to_ids
from .lstm_kernels import Float32Products, LstmState, StepProducts, packed_steps
from .options import BiLMConfig
from .row_states import RowStates
from .token_cache import TokenCache


class CharEncoder(nn.Module):
    """Token ids (N, 50) -> context-free token vectors (N, projection_dim): doc sections 4.1-4.4.

    With `config.token_input` (ELMoForManyLangs) a token's ids are [word id;] character ids from
    the model's own lexicons, each +1 so that 0 still means "no token": the word embedding is
    concatenated before the highway output and both go through the projection, as their
    `ConvTokenEmbedder` does. The char CNN and highway are the same code for both kinds.
    """

    def __init__(self, config: BiLMConfig, char_rows: int = N_CODES, initialize: bool = True):
        super().__init__()
        self.config = config
        d = config.char_dim
        ti = config.token_input
        if ti is not None:
            char_rows = ti.char_rows
        self.pad_id = (ti.char_pad if ti is not None else PAD_CHAR) + 1  # a token's padding slots, as stored ids
        self.char_embed = nn.Parameter(torch.empty(char_rows, d))
        if config.word_dim:
            self.word_embed = nn.Parameter(torch.empty(ti.word_rows, ti.word_dim))
        else:
            self.register_parameter("word_embed", None)
        self.conv_weights = nn.ParameterList(nn.Parameter(torch.empty(w, d, n)) for w, n in config.filters)
        self.conv_biases = nn.ParameterList(nn.Parameter(torch.empty(n)) for _, n in config.filters)
        nf = config.n_filters
        self.highway_carry_w = nn.ParameterList(nn.Parameter(torch.empty(nf, nf)) for _ in range(config.n_highway))
        self.highway_carry_b = nn.ParameterList(nn.Parameter(torch.empty(nf)) for _ in range(config.n_highway))
        self.highway_transform_w = nn.ParameterList(nn.Parameter(torch.empty(nf, nf)) for _ in range(config.n_highway))
        self.highway_transform_b = nn.ParameterList(nn.Parameter(torch.empty(nf)) for _ in range(config.n_highway))
        if config.has_cnn_projection:
            self.proj_w = nn.Parameter(torch.empty(config.token_features, config.projection_dim))
            self.proj_b = nn.Parameter(torch.empty(config.projection_dim))
        else:
            self.register_parameter("proj_w", None)
            self.register_parameter("proj_b", None)
        if initialize:
            self.reset_parameters()
        self.int8 = None  # set by elmo.model.int8.quantize_bilm: int8 highways and projection, inference only

    @property
    def _stored_zero_row(self) -> bool:
        """Byte-level tables of 262 rows keep the zero row of id 0 in the file; all others get it prepended."""
        return self.config.token_input is None and self.char_embed.shape[0] == N_CODES + 1

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Fresh weights as bilm-tf initialises them (carry bias -2 favours passing the input through)."""
        nn.init.uniform_(self.char_embed, -1.0, 1.0)
        if self._stored_zero_row:
            self.char_embed[0].zero_()
        if self.word_embed is not None:
            nn.init.normal_(self.word_embed)
        for w, b in zip(self.conv_weights, self.conv_biases):
            nn.init.uniform_(w, -0.05, 0.05)
            b.zero_()
        nf = self.config.n_filters
        for k in range(self.config.n_highway):
            nn.init.normal_(self.highway_carry_w[k], std=(1.0 / nf) ** 0.5)
            nn.init.normal_(self.highway_transform_w[k], std=(1.0 / nf) ** 0.5)
            self.highway_carry_b[k].fill_(-2.0)
            self.highway_transform_b[k].zero_()
        if self.proj_w is not None:
            nn.init.normal_(self.proj_w, std=(1.0 / self.proj_w.shape[0]) ** 0.5)
            self.proj_b.zero_()

    def embedding_table(self) -> torch.Tensor:
        """The inference table indexed by id: a zero row for id 0, then one row per code."""
        if self._stored_zero_row:
            return self.char_embed
        return torch.cat([self.char_embed.new_zeros(1, self.char_embed.shape[1]), self.char_embed])

    def split_ids(self, ids: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """ids (N, ids_width) -> (word ids (N,) or None, character ids (N, max_chars) or None), still +1."""
        if self.word_embed is None:
            return None, ids
        return ids[:, 0], (ids[:, 1:] if self.config.reads_chars else None)

    def filter_maxima(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each filter's maximum over positions (before the activation) and where it was: (N, n_filters) each.

        Exact, without computing the windows that lie wholly in a token's trailing padding: those all
        see the same codes, so they share one value per filter, computed once. Only the windows
        starting before the batch's longest token ends are run. A maximum taken in the padding is
        reported at the first all-padding window of that token.
        """
        table = self.embedding_table()
        n, length = ids.shape
        extents = padding_start(ids, self.pad_id)
        extent = int(extents.max()) if n else 0
        x = F.embedding(ids, table)  # (N, 50, d)
        pad_row = table[self.pad_id]
        values, positions = [], []
        for w, b in zip(self.conv_weights, self.conv_biases):
            # "VALID" convolution as one GEMM over the windows (im2col), then max over positions.
            width, d, n_out = w.shape
            w_flat = w.reshape(width * d, n_out)
            starts = max(1, min(extent, length - width + 1))  # at least one window, even for all-padding ids
            windows = x[:, : starts + width - 1].unfold(1, width, 1).transpose(2, 3).reshape(n * starts, width * d)
            y = torch.addmm(b, windows, w_flat).view(n, starts, n_out)
            if starts < length - width + 1:  # the remaining windows are all padding, for every token
                padding = torch.addmm(b.unsqueeze(0), pad_row.repeat(width).unsqueeze(0), w_flat)
                y = torch.cat([y, padding.unsqueeze(0).expand(n, 1, -1)], dim=1)
            best, where = y.max(dim=1)
            values.append(best)
            positions.append(torch.minimum(where, extents.clamp(max=length - width).unsqueeze(1)))
        return torch.cat(values, dim=1), torch.cat(positions, dim=1)

    def activation(self, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(y) if self.config.activation == "relu" else torch.tanh(y)

    def highway(self, k: int, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Highway layer k: (new h, gate). The gate g lets the relu-transformed value through."""
        if self.int8 is not None:
            return self.int8.highway(k, h)
        gate = torch.sigmoid(torch.addmm(self.highway_carry_b[k], h, self.highway_carry_w[k]))
        transformed = torch.relu(torch.addmm(self.highway_transform_b[k], h, self.highway_transform_w[k]))
        return gate * transformed + (1.0 - gate) * h, gate

    def project(self, h: torch.Tensor) -> torch.Tensor:
        if self.int8 is not None:
            return self.int8.project(h)
        return torch.addmm(self.proj_b, h, self.proj_w) if self.proj_w is not None else h

    def forward(self, ids: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """ids (N, ids_width) -> (N, projection_dim). Runs in chunks of tokens of similar length, which
        bounds memory and lets short tokens skip their padding (see `filter_maxima`)."""
        if ids.shape[0] <= chunk:
            return self._encode(ids)
        chars = self.split_ids(ids)[1]
        order = torch.argsort(padding_start(ids if chars is None else chars, self.pad_id), stable=True)
        parts = torch.cat([self._encode(ids[rows]) for rows in order.split(chunk)])
        return parts[torch.argsort(order)]

    def _encode(self, ids: torch.Tensor) -> torch.Tensor:
        words, chars = self.split_ids(ids)
        features = []
        if words is not None:  # ids 0 (no token) look up row 0; their vectors are masked out later
            features.append(F.embedding((words - 1).clamp(min=0), self.word_embed))
        if chars is not None:
            h = self.activation(self.filter_maxima(chars)[0])
            for k in range(self.config.n_highway):
                h, _ = self.highway(k, h)
            features.append(h)
        return self.project(features[0] if len(features) == 1 else torch.cat(features, dim=1))


def check_right_padded(mask: torch.Tensor, what: str) -> None:
    """Each row's tokens first, then its padding: the markers, the backward reversal and the LSTM's row
    lengths all assume it, and a hole or left padding would give wrong vectors without a word."""
    if mask.dim() == 2 and mask.shape[1] > 1 and bool((later := mask[:, 1:] & ~mask[:, :-1]).any()):
        row, step = (int(i) for i in later.nonzero()[0])
        raise InputError(f"{what}: row {row} has padding{' (ids all 0)' * (what == 'char_ids')} at token {step} and a token after it at "
                         f"{step + 1}; each row must hold its tokens first and its padding after them (right padding)")


def padding_start(ids: torch.Tensor, pad_id: int = PAD_CHAR + 1) -> torch.Tensor:
    """Per token (row of ids), where its trailing run of padding characters starts (50 if none)."""
    is_code = ids != pad_id
    positions = torch.arange(1, ids.shape[1] + 1, device=ids.device)
    return (is_code * positions).amax(dim=1) if ids.shape[1] else ids.new_zeros(ids.shape[0])


class LstmLayer(nn.Module):
    """TensorFlow's LSTMCell with projection and clipping (doc 4.5), run over a whole batch.

    `W_0` rows are [layer input; previous h], its column blocks i | j | f | o; `B` is stored without
    the forget bias, which is added here.
    """

    def __init__(self, input_dim: int, config: BiLMConfig, initialize: bool = True):
        super().__init__()
        self.input_dim, self.cell_dim = input_dim, config.dim
        self.out_dim = config.projection_dim
        self.cell_clip, self.proj_clip = config.cell_clip, config.proj_clip
        self.W_0 = nn.Parameter(torch.empty(input_dim + self.out_dim, 4 * config.dim))
        self.B = nn.Parameter(torch.empty(4 * config.dim))
        if config.has_lstm_projection:
            self.W_P_0 = nn.Parameter(torch.empty(config.dim, config.projection_dim))
        else:
            self.register_parameter("W_P_0", None)
        if initialize:
            self.reset_parameters()
        self.int8 = None  # set by elmo.model.int8.quantize_bilm: an inference-only int8 copy of the products

    @torch.no_grad()
    def reset_parameters(self) -> None:
        bound = (6.0 / (self.W_0.shape[0] + self.W_0.shape[1])) ** 0.5  # TF's glorot_uniform default
        nn.init.uniform_(self.W_0, -bound, bound)
        self.B.zero_()
        if self.W_P_0 is not None:
            bound = (6.0 / sum(self.W_P_0.shape)) ** 0.5
            nn.init.uniform_(self.W_P_0, -bound, bound)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, state: LstmState) -> tuple[torch.Tensor, LstmState]:
        """x (B, T, input_dim) with rows sorted by descending length; returns (B, T, out_dim), final state.

        Row b runs its first lengths[b] steps only; as rows end, the active batch shrinks, so no
        work is spent on padding and each row's final state is the one after its last real step.
        The products come from `_products`: each step's in the fastest exact form for its shape
        (lstm_kernels.py), or a converted layer's int8 copy.
        """
        batch, steps, _ = x.shape
        active = [n for n in (lengths.unsqueeze(1) > torch.arange(steps, device=lengths.device)).sum(0).tolist() if n]
        products = self._products(packed_steps(x, active), active, self.B + self._forget_one(), x, state)
        c, h = state
        done_c, done_h = [], []  # final states of rows that ended, latest-ending first after the reversal below
        outputs: list[torch.Tensor] = []
        written = None  # without autograd, each step's h goes straight into one (B, T, out) buffer: no stack copy
        for t, n in enumerate(active):
            if n < c.shape[0]:  # rows n.. ended at the previous step
                done_c.append(c[n:])
                done_h.append(h[n:])
                c, h = c[:n], h[:n]
            i, j, f, o = products.gates(t, h)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * products.tanh(j)
            if self.cell_clip is not None:
                c = c.clamp(-self.cell_clip, self.cell_clip)
            h = torch.sigmoid(o) * products.tanh(c)
            if self.W_P_0 is not None:
                h = products.project(h)
                if self.proj_clip is not None:
                    h = h.clamp(-self.proj_clip, self.proj_clip)
            if torch.is_grad_enabled():
                outputs.append(h if n == batch else F.pad(h, (0, 0, 0, batch - n)))
                continue
            if written is None:
                written = h.new_zeros(batch, steps, self.out_dim)
            written[:n, t] = h
        if written is not None:
            out = written
        else:
            outputs += [x.new_zeros(batch, self.out_dim)] * (steps - len(outputs))
            out = torch.stack(outputs, dim=1) if outputs else x.new_zeros(batch, 0, self.out_dim)
        if done_c:
            c, h = torch.cat([c, *done_c[::-1]]), torch.cat([h, *done_h[::-1]])
        return out, (c.contiguous(), h.contiguous())

    def _products(self, packed: torch.Tensor, active: list[int], bias: torch.Tensor, x: torch.Tensor,
                  state: LstmState) -> StepProducts:
        """This call's products: the input products of all steps (`packed`, from `packed_steps`), then
        per step the gates from h and the projection of h. A layer converted by `elmo.model.int8` runs its own."""
        if self.int8 is not None:
            return self.int8.products(packed, active, x, state, list(self.parameters()))
        w_x, w_h_rows = self.W_0[: self.input_dim], self.W_0[self.input_dim :]
        return Float32Products(w_x, w_h_rows, self.W_P_0, bias, packed, active, x, state, list(self.parameters()))

    def _forget_one(self) -> torch.Tensor:
        one = torch.zeros_like(self.B)
        one[2 * self.cell_dim : 3 * self.cell_dim] = 1.0
        return one

    def zero_state(self, rows: int, like: torch.Tensor) -> LstmState:
        """float32 even when `like` is bfloat16 (autocast): the cell state then accumulates in float32."""
        dtype = torch.promote_types(like.dtype, torch.float32)
        return like.new_zeros(rows, self.cell_dim, dtype=dtype), like.new_zeros(rows, self.out_dim, dtype=dtype)


class LstmStack(nn.Module):
    """One direction's stack of LSTM layers, with optional residuals and training-time input dropout.

    Dropout hits every layer's input, as bilm-tf's DropoutWrapper; with `first_layer_dropout` off
    it spares the first layer's (the token vectors), as Kim et al. (2016) do.

    Residual (doc 4.6): out_l = lstm_l(in_l) + in_l for l >= 2, where in_l is the (dropped-out)
    output of the layer below; the recurrent state carries the un-summed LSTM output.
    """

    def __init__(self, config: BiLMConfig, dropout: float = 0.0, initialize: bool = True):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(LstmLayer(config.projection_dim, config, initialize) for _ in range(config.n_layers))
        self.dropout = dropout
        self.first_layer_dropout = True

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, states: list[LstmState] | None = None
    ) -> tuple[list[torch.Tensor], list[LstmState]]:
        """x (B, T, P) sorted by descending length -> per-layer outputs (B, T, P) and final states."""
        if states is None:
            states = [layer.zero_state(x.shape[0], x) for layer in self.layers]
        outputs, finals = [], []
        inp = x
        for k, (layer, state) in enumerate(zip(self.layers, states)):
            if self.training and self.dropout > 0 and (k > 0 or self.first_layer_dropout):
                inp = F.dropout(inp, self.dropout, training=True)
            out, final = layer(inp, lengths, state)
            if k > 0 and self.config.use_skip_connections:
                in_place = not torch.is_grad_enabled() and out.dtype == inp.dtype  # `out` is this call's own
                out = out.add_(inp) if in_place else out + inp
            outputs.append(out)
            finals.append(final)
            inp = out
        return outputs, finals


@dataclass
class BiLMOutput:
    """`layers`: L+1 tensors (B, T+2, 2P) including the <S>/</S> positions; `mask`: (B, T+2) bool."""

    layers: list[torch.Tensor]
    mask: torch.Tensor


class BiLM(nn.Module):
    """The bidirectional LM: shared char encoder, a forward and a backward LSTM stack.

    Stateless by default (every call starts from zero state). With `stateful=True`, each batch row
    keeps its final state for the next call, as the original tools do (doc 4.8). `lexicon` maps
    tokens to ids for models whose inputs are not UTF-8 bytes (src/elmo/formats/manylangs.py).
    `initialize=False` leaves the parameters unset, for a loader that fills every one of them or for
    a shape-only copy on the meta device (initialising meta tensors imports torch._dynamo, ~1 s).
    """

    def __init__(self, config: BiLMConfig, char_rows: int = N_CODES, stateful: bool = False,
                 lexicon: Lexicon | None = None, initialize: bool = True):
        super().__init__()
        check_fits_memory(config)
        self.config = config
        self.lexicon = lexicon
        self.char_encoder = CharEncoder(config, char_rows, initialize)
        self.forward_lstm = LstmStack(config, initialize=initialize)
        self.backward_lstm = LstmStack(config, initialize=initialize)
        self.stateful = stateful
        self._states = RowStates()  # used in stateful mode only
        self.token_cache = TokenCache()

    def reset_states(self) -> None:
        """Forget the stored per-row states: every row starts from zero again."""
        self._states.clear()

    @property
    def num_layers(self) -> int:
        return self.config.n_layers + 1

    def output_dim(self) -> int:
        return self.config.output_dim

    def token_vectors(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Context-free vectors (B, T, P) for ids (B, T, 50): the encoder runs once per distinct token."""
        flat = ids[mask]
        out = ids.new_zeros(mask.shape + (self.config.projection_dim,), dtype=self.char_encoder.char_embed.dtype)
        if flat.shape[0]:
            unique, inverse = torch.unique(flat, dim=0, return_inverse=True)
            frozen = not (torch.is_grad_enabled() and any(p.requires_grad for p in self.char_encoder.parameters()))
            vectors = self.token_cache(self.char_encoder, unique) if frozen else self.char_encoder(unique)
            out[mask] = vectors[inverse].to(out.dtype)
        return out

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """This model's input ids for tokenized sentences: `elmo.batch_to_ids`, or its lexicon's."""
        return batch_to_ids(sentences) if self.lexicon is None else self.lexicon.batch_to_ids(sentences)

    def boundary_vectors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Token vectors of <S> and </S> (ELMoForManyLangs: <bos> and <eos>)."""
        ids = torch.stack([BOS_IDS, EOS_IDS]) if self.lexicon is None else self.lexicon.boundary_ids()
        ids = ids.to(self.char_encoder.char_embed.device)
        bos, eos = self.char_encoder(ids)
        return bos, eos

    def forward(self, char_ids: torch.Tensor | None = None, token_vectors: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> BiLMOutput:
        """Run the biLM on char ids (B, T, 50) without markers (zero rows = padding), or on
        precomputed token vectors (B, T, P) with their mask. Markers are added here. Models with a
        lexicon take its ids (`batch_to_ids`), (B, T, ids_width)."""
        if token_vectors is None:
            width = self.config.ids_width
            if char_ids is None or char_ids.dim() != 3 or char_ids.shape[-1] != width:
                shape = None if char_ids is None else tuple(char_ids.shape)
                what = "character ids" if self.lexicon is None else "token ids (from bilm.batch_to_ids)"
                raise InputError(f"expected {what} of shape (batch, tokens, {width}), found {shape}")
            mask = (char_ids > 0).any(-1)
            check_right_padded(mask, "char_ids")
            token_vectors = self.token_vectors(char_ids, mask)
        elif mask is None:
            raise InputError("token_vectors needs its mask")
        else:
            check_right_padded(mask, "mask")
        bos, eos = self.boundary_vectors()
        x, mask = add_sentence_boundaries(token_vectors, mask, bos, eos)
        del token_vectors  # x is a new tensor: the padded batch is held once
        return self.contextualize(x.mul_(mask.unsqueeze(-1).to(x.dtype)), mask)

    def contextualize(self, x: torch.Tensor, mask: torch.Tensor) -> BiLMOutput:
        """Token vectors with markers (B, T+2, P) -> all layers (doc 4.6-4.7)."""
        batch, steps, _ = x.shape
        lengths = mask.sum(1)
        order = torch.argsort(lengths, descending=True, stable=True)
        in_order = bool((order == torch.arange(batch, device=order.device)).all())  # the Embedder sorts its batches
        unsort = torch.argsort(order)
        lengths_sorted = lengths[order]
        x_sorted = x if in_order else x[order]
        rev = reverse_index(lengths_sorted, steps)
        x_reversed = torch.gather(x_sorted, 1, rev.unsqueeze(-1).expand_as(x_sorted))

        stacks = {"forward": self.forward_lstm, "backward": self.backward_lstm}
        fwd_states, bwd_states = self._states.initial(stacks, batch, x, order) if self.stateful else (None, None)
        fwd, fwd_final = self.forward_lstm(x_sorted, lengths_sorted, fwd_states)
        del x_sorted
        bwd, bwd_final = self.backward_lstm(x_reversed, lengths_sorted, bwd_states)
        del x_reversed
        if self.stateful:
            self._states.store(fwd_final, bwd_final, unsort)

        layers = [torch.cat([x, x], dim=-1)]
        fwd.reverse(), bwd.reverse()  # popped from the end: each layer's halves are freed once joined
        while fwd:
            both = join_directions(fwd.pop(), bwd.pop(), rev)
            layers.append(both if in_order else both[unsort])
        return BiLMOutput(layers=layers, mask=mask)
