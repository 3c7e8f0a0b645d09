"""ELMoForManyLangs model directories (HIT-SCIR, `elmoformanylangs`), read into this package's BiLM.

Their directory: `config.json` (whose `config_path` names the architecture JSON), `char.dic` and
`word.dic` (token TAB id), `token_embedder.pkl` and `encoder.pkl` (torch state_dicts). Their token
embedder is our char CNN + highway with a word embedding beside it; their encoder is AllenNLP's LSTM
with projection and clipping, which is ours once the gates are reordered. So the weights are
translated into the one BiLM of src/elmo/model/bilm.py; only the ids differ, which `ManyLangsLexicon` makes
exactly as their `read_list` + `create_one_batch` do, quirks included (docs/manylangs.md):

- the first character slot holds the id of `<eow>` and the last the id of `<bow>` (their
  `create_one_batch` reads the two swapped; the models were trained that way);
- a token longer than `max_characters_per_token - 2` characters is cut to that length, and its word
  is looked up cut too;
- unknown characters and words take the id of `<oov>`; a token's unused slots hold `<pad>`;
- `<bos>` / `<eos>` are tokens of their own (word and character ids), not bilm-tf's markers.

Unlike their embedder, every sentence starts from zero LSTM state unless `stateful=True`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from elmo.errors import ModelFileError, ModelFileNotFound
from elmo.files.fileio import read_json, read_text
from elmo.files.layout import CHAR_DIC, ENCODER_PKL, TOKEN_EMBEDDER_PKL, WORD_DIC
from elmo.files.layout import MANYLANGS_CONFIG as CONFIG_NAME
from elmo.model.bilm import BiLM
from elmo.model.options import BiLMConfig, TokenInput, config_clip, config_filters, config_int, config_section

from .manylangs_weights import load_weights

MARKERS = ("<bos>", "<eos>")
CHAR_SPECIALS = ("<bow>", "<eow>", "<oov>", "<pad>", "<bos>", "<eos>")
WORD_SPECIALS = ("<oov>", "<pad>")

# The architecture their package ships in elmoformanylangs/configs/ (both files have this content):
# the released models' config.json names it, and their code falls back to its own copy when the
# model directory lacks it. Hyper-parameters only, so that downloaded models load as they do there.
SHIPPED_ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {"name": "cnn", "activation": "relu",
                       "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                       "n_highway": 2, "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50},
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
MAX_CHARS_LIMIT = 1000  # characters per token (theirs: 50); each token's ids take this many slots
MAX_SIZE = 1 << 20  # the largest width, count or dimension their architecture JSON may give
SHIPPED_CONFIGS = ("cnn_50_100_512_4096_sample.json", "cnn_0_100_512_4096_sample.json")


def read_architecture(directory: Path) -> tuple[dict, str]:
    """config.json -> (the architecture JSON it names, where it came from), resolved as their code does:
    `config_path` under the model directory, else its file name in the directory, else their shipped one."""
    config_file = directory / CONFIG_NAME
    config = read_json(config_file, "ELMoForManyLangs config.json")
    named = config.get("config_path") if isinstance(config, dict) else None
    if not isinstance(named, str) or not named:
        raise ModelFileError(f"{config_file}: expected a string 'config_path' naming the architecture JSON "
                             f"(e.g. configs/{SHIPPED_CONFIGS[0]}), found {named!r}")
    tried = [directory / named, directory / os.path.basename(named)]
    for candidate in tried:
        if candidate.is_file():
            return read_json(candidate, "architecture JSON"), str(candidate)
    if os.path.basename(named) in SHIPPED_CONFIGS:
        return json.loads(json.dumps(SHIPPED_ARCHITECTURE)), f"ELMoForManyLangs' shipped {os.path.basename(named)}"
    raise ModelFileError(
        f"{config_file}: config_path {named!r} does not resolve: neither {tried[0]} nor {tried[1]} exists, and "
        f"{os.path.basename(named)!r} is not one of ELMoForManyLangs' shipped configs ({', '.join(SHIPPED_CONFIGS)})"
    )


def read_dic(path: Path) -> dict[str, int]:
    """char.dic / word.dic as their reader parses it: each line stripped of surrounding whitespace and
    split at tabs; a line left with one field is the token U+3000 (whitespace, so strip() removed it).
    Lines are Unicode lines (str.splitlines, as their codecs reader), and a later line wins."""
    text = read_text(path, "dictionary (the model's architecture reads it)")
    lexicon: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        if len(fields) != 2 or not fields[1].isdecimal():
            raise ModelFileError(f"{path}, line {number}: expected 'token<TAB>id' with a non-negative integer id, "
                                 f"found {line!r}")
        lexicon[fields[0]] = int(fields[1])
    return lexicon


def _check_lexicon(path: Path, lexicon: dict[str, int], specials: Sequence[str]) -> None:
    missing = [s for s in specials if s not in lexicon]
    if missing:
        raise ModelFileError(f"{path}: missing the entries {', '.join(missing)} (their code needs {', '.join(specials)})")
    too_big = [(t, i) for t, i in lexicon.items() if i >= len(lexicon)]
    if too_big:
        raise ModelFileError(f"{path}: id {too_big[0][1]} of {too_big[0][0]!r} is outside the table of "
                             f"{len(lexicon)} rows (one per entry) that their code builds")


def _int(sec: dict, key: str, where: str, source: str, minimum: int = 1, maximum: int = MAX_SIZE) -> int:
    return config_int(sec, key, where, source, minimum, maximum, default=None)


def architecture_config(arch: Any, source: str, char_rows: int, char_pad: int, word_rows: int) -> BiLMConfig:
    """Their architecture JSON (+ the lexicon sizes) -> a BiLMConfig; what their code cannot run is an error."""
    encoder, te = config_section(arch, "encoder", source), config_section(arch, "token_embedder", source)
    if encoder.get("name") != "elmo":
        raise ModelFileError(f"{source}: 'encoder.name' {encoder.get('name')!r} is not supported; this package reads "
                             "ELMoForManyLangs' 'elmo' encoder (the one all their released models use)")
    if str(te.get("name", "")).lower() != "cnn":
        raise ModelFileError(f"{source}: 'token_embedder.name' {te.get('name')!r} is not supported; only 'cnn' "
                             "(their 'lstm' token embedder does not run in their own code)")
    char_dim = _int(te, "char_dim", "token_embedder", source, minimum=0)
    word_dim = _int(te, "word_dim", "token_embedder", source, minimum=0)
    if not char_dim and not word_dim:
        raise ModelFileError(f"{source}: 'token_embedder' has char_dim 0 and word_dim 0: the model reads nothing")
    max_chars = _int(te, "max_characters_per_token", "token_embedder", source, minimum=3, maximum=MAX_CHARS_LIMIT)
    filters, n_highway, activation = (), 0, "relu"
    if char_dim:
        filters = config_filters(te, "token_embedder", source, MAX_SIZE)
        n_highway = _int(te, "n_highway", "token_embedder", source, minimum=0)
        activation = te.get("activation")
        if activation not in ("relu", "tanh"):
            raise ModelFileError(f"{source}: 'token_embedder.activation' must be 'relu' or 'tanh', found {activation!r}")
        if max(w for w, _ in filters) > max_chars:
            raise ModelFileError(f"{source}: a filter is wider than a token ({max_chars} characters)")
    dim = _int(encoder, "dim", "encoder", source)
    return BiLMConfig(
        char_dim=char_dim, filters=filters, n_highway=n_highway, activation=activation, max_chars=max_chars,
        dim=dim, projection_dim=_int(encoder, "projection_dim", "encoder", source),
        n_layers=_int(encoder, "n_layers", "encoder", source),
        cell_clip=config_clip(encoder, "cell_clip", "encoder", source),
        proj_clip=config_clip(encoder, "proj_clip", "encoder", source),
        use_skip_connections=True, raw=json.loads(json.dumps(arch)),
        token_input=TokenInput(char_rows=char_rows, char_pad=char_pad, word_rows=word_rows if word_dim else 0,
                               word_dim=word_dim),
    )


def parameter_counts(c: BiLMConfig) -> tuple[int, int]:
    """How many numbers token_embedder.pkl and encoder.pkl must hold for this architecture."""
    return c.token_parameters, c.lstm_parameters


def check_sizes(config: BiLMConfig, directory: Path, source: str) -> None:
    """The architecture's sizes must be ones the weight files can hold (2 bytes a number at the least),
    checked before anything is allocated: a config that asks for 10^9 cells fails here, at once."""
    for name, count in zip((TOKEN_EMBEDDER_PKL, ENCODER_PKL), parameter_counts(config)):
        size = (directory / name).stat().st_size
        if 2 * count > size:
            raise ModelFileError(f"{directory / name}: not a torch state_dict of this architecture: it holds {size:,} "
                                 f"bytes, and {source} calls for {count:,} weights in it (does the architecture "
                                 "JSON belong to these files?)")


class ManyLangsLexicon:
    """Tokens -> ids through their char.dic / word.dic, exactly as their `read_list` and
    `create_one_batch` make them (see the module docstring for the quirks). Ids are stored +1 so that
    0 means "no token"; a token's ids are [word id;] then `max_chars` character ids."""

    def __init__(self, chars: dict[str, int] | None, words: dict[str, int] | None, max_chars: int):
        self.chars, self.words, self.max_chars = chars, words, max_chars
        if chars is not None:
            # their create_one_batch: `bow_id, eow_id, ... = [char2id.get(key) for key in ('<eow>', '<bow>', ...)]`
            self._first, self._last = chars["<eow>"], chars["<bow>"]
            self._char_oov, self._pad = chars["<oov>"], chars["<pad>"]
        if words is not None:
            self._word_oov = words["<oov>"]
        self._cache: dict[str, tuple[int, ...]] = {}

    @property
    def width(self) -> int:
        return (1 if self.words is not None else 0) + (self.max_chars if self.chars is not None else 0)

    def _ids(self, token: str) -> tuple[int, ...]:
        ids = []
        if self.words is not None:
            ids.append(self.words.get(token, self._word_oov) + 1)
        if self.chars is not None:
            if token in MARKERS:
                codes = [self._first, self.chars[token], self._last]
            else:
                codes = [self._first, *(self.chars.get(c, self._char_oov) for c in token), self._last]
            codes += [self._pad] * (self.max_chars - len(codes))
            ids.extend(c + 1 for c in codes)
        return tuple(ids)

    def token_ids(self, token: str) -> tuple[int, ...]:
        """One input token's ids, cut to `max_chars - 2` characters first (their read_list)."""
        if not isinstance(token, str):
            raise TypeError(f"a token must be a str, found {type(token).__name__}: {token!r}")
        ids = self._cache.get(token)
        if ids is None:
            cut = token[: self.max_chars - 2] if len(token) + 2 > self.max_chars else token
            ids = self._cache[token] = self._ids(cut)
            if len(self._cache) > 1 << 16:
                self._cache.clear()
        return ids

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        if isinstance(sentences, (str, bytes)) or any(isinstance(s, (str, bytes)) for s in sentences):
            raise TypeError("batch_to_ids expects a list of tokenized sentences (a list of lists of str)")
        longest = max((len(s) for s in sentences), default=0)
        ids = torch.zeros(len(sentences), longest, self.width, dtype=torch.long)
        for row, sentence in enumerate(sentences):
            if sentence:
                ids[row, : len(sentence)] = torch.tensor([self.token_ids(t) for t in sentence], dtype=torch.long)
        return ids

    def boundary_ids(self) -> torch.Tensor:
        return torch.tensor([self._ids(m) for m in MARKERS], dtype=torch.long)

    def fingerprint(self) -> bytes:
        content = json.dumps([self.chars, self.words, self.max_chars], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(content.encode()).digest()


def load_manylangs(directory: str | os.PathLike, stateful: bool = False) -> BiLM:
    """An ELMoForManyLangs model directory -> a BiLM with its lexicon (`bilm.batch_to_ids`).

    Every file is checked before use; an error names the file, what was expected and what was found.
    """
    d = Path(directory)
    for name in (CONFIG_NAME, TOKEN_EMBEDDER_PKL, ENCODER_PKL):
        if not (d / name).is_file():
            raise ModelFileNotFound(f"{d / name}: missing; an ELMoForManyLangs model directory holds {CONFIG_NAME}, "
                                 f"{CHAR_DIC} and/or {WORD_DIC}, {TOKEN_EMBEDDER_PKL} and {ENCODER_PKL}")
    arch, source = read_architecture(d)
    te = config_section(arch, "token_embedder", source)
    chars = read_dic(d / CHAR_DIC) if te.get("char_dim") else None
    words = read_dic(d / WORD_DIC) if te.get("word_dim") else None
    if chars is not None:
        _check_lexicon(d / CHAR_DIC, chars, CHAR_SPECIALS)
    if words is not None:
        _check_lexicon(d / WORD_DIC, words, WORD_SPECIALS)
    config = architecture_config(arch, source, len(chars or ()), (chars or {}).get("<pad>", 0), len(words or ()))
    check_sizes(config, d, source)
    bilm = BiLM(config, stateful=stateful, lexicon=ManyLangsLexicon(chars, words, config.max_chars))
    load_weights(bilm, d / TOKEN_EMBEDDER_PKL, d / ENCODER_PKL,
                 {"char_emb_layer": d / CHAR_DIC, "word_emb_layer": d / WORD_DIC})
    return bilm
