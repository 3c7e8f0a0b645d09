"""A TF1-Hub-format ELMo module (TF-Hub's google/elmo/1, /2, /3 and modules built the same way) as a model, without
TensorFlow: its variables (a V2 checkpoint) become weights.hdf5, its architecture options.json, and its layer mix
(`aggregation/*`) tfhub_module.json beside them.

The variables are bilm-tf's inference graph under the scope `bilm` (bilm-tf's model.py maps the same names onto
weights.hdf5's) plus `aggregation/weights` and `aggregation/scaling`; bilm-tf's per-row LSTM state variables
(`bilm/Variable*`, zeros at export) are recognised and not weights. Shapes give the architecture. What shapes cannot
tell is read from the graph (saved_model.pb) where it shows, else taken from the published module's known settings
(PUBLISHED_SETTINGS); tfhub_module.json records where each setting came from:
- max_characters_per_token: the CNN's max-pool windows (`bilm/CNN/MaxPool*` ksize = max_chars - width + 1);
- activation: the op after each max-pool (`bilm/CNN/Relu*` or `bilm/CNN/Tanh*`);
- cell_clip, proj_clip: the constants of `lstm_cell/clip_by_value*` in the first LSTM's loop (the one on the
  projection's MatMul is proj_clip); a cell without them has no clip;
- use_skip_connections: ResidualWrapper's add of the cell's input (a TensorArrayReadV3) to its output in layer 2's loop.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from elmo.errors import ModelFileError, ModelFileNotFound
from elmo.files.fileio import atomic_dir, hash_file
from elmo.files.layout import OPTIONS_NAME, WEIGHTS_NAME
from elmo.files.output_paths import check_not_input
from elmo.model.options import BiLMConfig, read_options

from .checkpoint import TFCheckpoint
from .saved_model import MetaGraph, read_saved_model

MODULE_PROTO, SAVED_MODEL, VARIABLES_PREFIX = "tfhub_module.pb", "saved_model.pb", "variables/variables"
MIX_NAME = "tfhub_module.json"  # the module's mix and where each setting came from, beside options.json
SCOPE = "bilm/"
STATE = re.compile(r"bilm(_\d+)?/Variable(_\d+)?$")
AGGREGATION = ("aggregation/weights", "aggregation/scaling")
# The published google/elmo modules: the architecture of AllenNLP's "original" model (2x4096_512_2048cnn_2xhighway,
# trained on the 1 Billion Word Benchmark, as the modules' pages say theirs is), used only where the graph is silent.
PUBLISHED_SETTINGS = {"max_characters_per_token": 50, "activation": "relu", "cell_clip": 3.0, "proj_clip": 3.0,
                      "use_skip_connections": True}
PUBLISHED_SOURCE = "google/elmo's known settings (the original model's options.json)"
LSTM_NAMES = {"kernel": "W_0", "bias": "B", "projection/kernel": "W_P_0"}
# A module's graph holds nodes, not weights (those are in variables/): bilm-tf's graph takes about 11 KB per variable
# (the test module: 571 KB for 51 variables, both signatures). The bound allows 23 times that, plus a base.
GRAPH_BASE_BYTES, GRAPH_BYTES_PER_VARIABLE = 8 << 20, 256 << 10
IMPORT_VERSION = "2"  # part of the cache key: copies imported before the load check are never reused


def graph_budget(n_variables: int) -> int:
    """The most bytes saved_model.pb may have for a module of `n_variables` variables (module docstring)."""
    return GRAPH_BASE_BYTES + GRAPH_BYTES_PER_VARIABLE * max(n_variables, 0)


def is_hub_module(path: str | os.PathLike) -> bool:
    """A folder with saved_model.pb and tfhub_module.pb (TF1 Hub format), or saved_model.pb beside variables/ and no
    options.json."""
    d = Path(path)
    if not d.is_dir() or not (d / SAVED_MODEL).is_file():
        return False
    return (d / MODULE_PROTO).is_file() or ((d / "variables").is_dir() and not (d / OPTIONS_NAME).exists())


@dataclass(frozen=True)
class HubModule:
    """What a module holds: options.json's content, weights.hdf5 name -> checkpoint name, the mix, and sources."""

    path: Path
    options: dict
    weights: dict[str, str]
    mix_weights: list[float]
    scaling: float
    sources: dict[str, str]


def _weights_name(name: str) -> str:
    """bilm-tf's weights.hdf5 name of a module variable (bilm-tf model.py, _pretrained_initializer)."""
    name = name[len(SCOPE):]
    for graph, stored in LSTM_NAMES.items():
        if name.endswith("/rnn/lstm_cell/" + graph):
            return name[: -len("/rnn/lstm_cell/" + graph)] + "/LSTMCell/" + stored
    return name


def _count(names: set[str], pattern: str) -> int:
    found = {int(m.group(1)) for n in names if (m := re.fullmatch(pattern, n))}
    return len(found) if found == set(range(len(found))) else -1


def expected_shapes(shapes: dict[str, tuple[int, ...]], where: str) -> tuple[dict, dict[str, tuple[int, ...]]]:
    """The architecture the variables' shapes describe and the shape every variable must then have."""
    names = set(shapes)
    for required in ("bilm/char_embed", *AGGREGATION):
        if required not in names:
            raise ModelFileError(f"{where}: not an ELMo module: no variable {required!r} (found {sorted(names)[:6]}...)")
    n_conv, n_high = _count(names, r"bilm/CNN/W_cnn_(\d+)"), _count(names, r"bilm/CNN_high_(\d+)/W_carry")
    n_layers = _count(names, r"bilm/RNN_0/RNN/MultiRNNCell/Cell(\d+)/rnn/lstm_cell/kernel")
    if n_conv <= 0 or n_layers <= 0 or n_high < 0:
        raise ModelFileError(f"{where}: not an ELMo module: the CNN filters (bilm/CNN/W_cnn_N) and LSTM layers "
                             f"(bilm/RNN_0/.../CellN) must be numbered 0, 1, ... without gaps")
    rows, char_dim = _shape(shapes, "bilm/char_embed", 2, where)
    filters = [[_shape(shapes, f"bilm/CNN/W_cnn_{i}", 4, where)[1], shapes[f"bilm/CNN/W_cnn_{i}"][-1]] for i in range(n_conv)]
    n_filters = sum(n for _, n in filters)
    cell = "bilm/RNN_0/RNN/MultiRNNCell/Cell0/rnn/lstm_cell/"
    dim = _shape(shapes, cell + "bias", 1, where)[0] // 4
    proj = shapes[cell + "projection/kernel"][-1] if cell + "projection/kernel" in shapes else dim
    want = {"bilm/char_embed": (rows, char_dim), "aggregation/weights": (n_layers + 1,), "aggregation/scaling": (1,)}
    for i, (width, num) in enumerate(filters):
        want[f"bilm/CNN/W_cnn_{i}"], want[f"bilm/CNN/b_cnn_{i}"] = (1, width, char_dim, num), (num,)
    for k in range(n_high):
        for part in ("carry", "transform"):
            want[f"bilm/CNN_high_{k}/W_{part}"], want[f"bilm/CNN_high_{k}/b_{part}"] = (n_filters, n_filters), (n_filters,)
    if n_filters != proj:
        want["bilm/CNN_proj/W_proj"], want["bilm/CNN_proj/b_proj"] = (n_filters, proj), (proj,)
    for direction in (0, 1):
        for layer in range(n_layers):
            root = f"bilm/RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/rnn/lstm_cell/"
            want[root + "kernel"], want[root + "bias"] = (2 * proj, 4 * dim), (4 * dim,)
            if proj != dim:
                want[root + "projection/kernel"] = (dim, proj)
    options = {"lstm": {"dim": dim, "projection_dim": proj, "n_layers": n_layers},
               "char_cnn": {"embedding": {"dim": char_dim}, "filters": filters, "n_highway": n_high, "n_characters": 262}}
    return options, want


def _shape(shapes: dict, name: str, rank: int, where: str) -> tuple[int, ...]:
    if name not in shapes:
        raise ModelFileError(f"{where}: not a complete ELMo module: variable {name!r} is missing")
    if len(shapes[name]) != rank:
        raise ModelFileError(f"{where}: variable {name!r} has shape {list(shapes[name])}, expected rank {rank}")
    return shapes[name]


def check_variables(shapes: dict[str, tuple[int, ...]], where: str) -> dict:
    """options (without the graph's settings) for variables that form an ELMo; else one error naming what is off."""
    options, want = expected_shapes(shapes, where)
    found = {n for n in shapes if not STATE.fullmatch(n)}
    missing, extra = sorted(set(want) - found), sorted(found - set(want))
    if missing:
        raise ModelFileError(f"{where}: not a complete ELMo module: missing {', '.join(missing[:4])}"
                             f"{f' and {len(missing) - 4} more' if len(missing) > 4 else ''}")
    if extra:
        raise ModelFileError(f"{where}: variables an ELMo module does not have: {', '.join(extra[:4])}"
                             f"{f' and {len(extra) - 4} more' if len(extra) > 4 else ''}")
    for name, shape in want.items():
        if tuple(shapes[name]) != shape:
            raise ModelFileError(f"{where}: variable {name!r} has shape {list(shapes[name])}, but the other variables "
                                 f"make it {list(shape)}")
    if shapes["bilm/char_embed"][0] not in (261, 262):
        raise ModelFileError(f"{where}: bilm/char_embed has {shapes['bilm/char_embed'][0]} rows, expected 262 (bilm-tf's "
                             f"261 character codes and the padding row)")
    return options


def _graph(graphs: list[MetaGraph]) -> MetaGraph:
    """The graph TF-Hub applies by default: the one without tags, else the first."""
    return next((g for g in graphs if not g.tags), graphs[0])


def graph_settings(graph: MetaGraph, filters: list[list[int]], n_layers: int) -> dict[str, tuple[object, str]]:
    """setting -> (value, where it was read) for what the graph shows (module docstring); absent where it is silent."""
    nodes, found = graph.nodes, {}
    pools = {int(m.group(1) or 0): n for name, n in nodes.items() if (m := re.fullmatch(r"bilm/CNN/MaxPool(?:_(\d+))?", name))}
    widths = {pools[i].ints("ksize")[2:3][0] + filters[i][0] - 1 for i in pools if i < len(filters) and len(pools[i].ints("ksize")) == 4}
    if len(pools) == len(filters) and len(widths) == 1:
        found["max_characters_per_token"] = (widths.pop(), "graph: bilm/CNN/MaxPool* ksize")
    ops = {n.op for name, n in nodes.items() if re.fullmatch(r"bilm/CNN/(Relu|Tanh)(_\d+)?", name)}
    if len(ops) == 1:
        op = ops.pop()
        found["activation"] = (op.lower(), f"graph: bilm/CNN/{op}*")
    loop = "bilm/RNN_0/RNN/MultiRNNCell/Cell0/rnn/while/lstm_cell/"
    if any(name.startswith(loop) for name in nodes):
        clips = {"cell_clip": (None, f"graph: no clip in {loop}"), "proj_clip": (None, f"graph: no clip in {loop}")}
        for name, node in nodes.items():
            if re.fullmatch(re.escape(loop) + r"clip_by_value(_\d+)?/Minimum", name) and len(node.inputs) == 2:
                source, bound = (nodes.get(i.lstrip("^")) for i in node.inputs)
                value = bound.scalar() if bound is not None else None
                which = "proj_clip" if source is not None and source.op == "MatMul" else "cell_clip"
                if value is not None:
                    clips[which] = (value, f"graph: {bound.name}")
        found.update(clips)
    if n_layers == 1:
        found["use_skip_connections"] = (False, "one LSTM layer (bilm-tf never adds a skip to the first)")
    else:
        loop = "bilm/RNN_0/RNN/MultiRNNCell/Cell1/rnn/while/"
        if any(name.startswith(loop + "lstm_cell/") for name in nodes):
            residual = any(name.startswith(loop) and "/" not in name[len(loop):] and node.op in ("Add", "AddV2")
                           and {nodes[i].op for i in node.inputs if i in nodes} >= {"TensorArrayReadV3"}
                           and any(i.startswith(loop + "lstm_cell/") for i in node.inputs)
                           for name, node in nodes.items())
            found["use_skip_connections"] = (residual, f"graph: {'an' if residual else 'no'} add of input and output "
                                                       f"in {loop}")
    return found


def check_mix(weights, scaling, n_layers: int, where: str) -> tuple[list[float], float]:
    """The layer mix as numbers: one finite weight per layer of the biLM (the token layer and each LSTM layer) and a
    finite scaling; else one ModelFileError naming `where`."""
    count = n_layers + 1
    if not isinstance(weights, (list, tuple)) or not weights:
        raise ModelFileError(f"{where}: the mix weights must be a list of {count} numbers (one per layer: the token "
                             f"layer and {n_layers} LSTM layers), found {repr(weights)[:60]}")
    if len(weights) != count:
        raise ModelFileError(f"{where}: {len(weights)} mix weights for {count} layers (the token layer and {n_layers} "
                             f"LSTM layers); expected {count}")
    for i, value in enumerate([*weights, scaling]):
        what = f"mix weight {i}" if i < count else "the mix scaling"
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise ModelFileError(f"{where}: {what} must be a number, found {repr(value)[:40]}")
        if not math.isfinite(float(value)):
            raise ModelFileError(f"{where}: {what} is {float(value)}; a mix must be finite (it would make every "
                                 f"output NaN or infinite)")
    return [float(w) for w in weights], float(scaling)


def read_hub_module(path: str | os.PathLike) -> HubModule:
    """A module folder's architecture, weights map and mix; ModelFileError naming the folder for anything else."""
    d = Path(path)
    if not (d / SAVED_MODEL).is_file():
        raise ModelFileNotFound(f"{d}: not a TF-Hub module (no {SAVED_MODEL})")
    if not (d / (VARIABLES_PREFIX + ".index")).is_file():
        raise ModelFileNotFound(f"{d}: a TF-Hub module without its variables ({VARIABLES_PREFIX}.index)")
    ckpt = TFCheckpoint(d / VARIABLES_PREFIX)
    graphs = read_saved_model(d / SAVED_MODEL, max_bytes=graph_budget(len(ckpt.entries)),
                              why=f"for a module of {len(ckpt.entries)} variables")
    shapes = {name: entry.shape for name, entry in ckpt.entries.items()}
    where = f"{d} (TF-Hub module)"
    options = check_variables(shapes, where)
    settings = graph_settings(_graph(graphs), options["char_cnn"]["filters"], options["lstm"]["n_layers"])
    sources = {}
    for key, default in PUBLISHED_SETTINGS.items():
        value, source = settings.get(key, (default, PUBLISHED_SOURCE))
        options["lstm" if key in ("cell_clip", "proj_clip", "use_skip_connections") else "char_cnn"][key] = value
        sources[key] = source
    BiLMConfig.from_options(options, source=f"{where}: the architecture it declares")  # settings read from its graph
    for name in (n for n in shapes if not STATE.fullmatch(n)):
        if ckpt.entry(name).dtype != "float32":
            raise ModelFileError(f"{where}: variable {name!r} is {ckpt.entry(name).dtype}, expected float32")
    weights = {_weights_name(n): n for n in shapes if n.startswith(SCOPE) and not STATE.fullmatch(n)}
    mix, scaling = check_mix(ckpt.read("aggregation/weights").tolist(), ckpt.read("aggregation/scaling")[0].item(),
                             options["lstm"]["n_layers"], f"{where}: aggregation/weights and aggregation/scaling")
    return HubModule(d, options, weights, mix, scaling, sources)


def write_original(module: HubModule, out: str | os.PathLike, overwrite: bool = False, source: str | None = None) -> Path:
    """OUT: options.json + weights.hdf5 (bilm-tf's names, the char table's zero padding row dropped as weights.hdf5
    stores it) and tfhub_module.json (the mix, the sources of the settings; `source`: what the module was given as,
    by default its folder), written atomically and loaded as first use loads them before they are renamed into
    place: a module that does not load writes nothing."""
    from elmo.formats.weights import load_bilm

    out = Path(out)
    names = (OPTIONS_NAME, WEIGHTS_NAME, MIX_NAME)
    present = [n for n in names if (out / n).exists()]
    if present and not overwrite:
        raise ModelFileError(f"{out}: already holds {', '.join(present)}; pass --overwrite to replace them")
    check_not_input(out, {"MODULE": str(module.path)}, flag="OUT", folder=True)
    ckpt = TFCheckpoint(module.path / VARIABLES_PREFIX)
    with atomic_dir(out, replace=names) as tmp:
        (Path(tmp) / OPTIONS_NAME).write_text(json.dumps(module.options, indent=1) + "\n", encoding="utf-8")
        with h5py.File(Path(tmp) / WEIGHTS_NAME, "w") as f:
            for stored, name in sorted(module.weights.items()):
                value = np.asarray(ckpt.read(name), dtype=np.float32)
                if stored == "char_embed" and value.shape[0] == 262 and not value[0].any():
                    value = value[1:]
                f.create_dataset(stored, data=value)
        record = {"module": source or str(module.path), "mix": {"weights": module.mix_weights, "scaling": module.scaling},
                  "settings_from": module.sources}
        (Path(tmp) / MIX_NAME).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        try:  # what first use does: the biLM loads (every weight finite) and so does the mix
            load_bilm(Path(tmp) / OPTIONS_NAME, Path(tmp) / WEIGHTS_NAME)
            read_mix(tmp)
        except ModelFileError as e:
            raise ModelFileError(f"{module.path} (TF-Hub module): imported, it does not load, so nothing was written: "
                                 + str(e).replace(f"{tmp}{os.sep}", "")) from None
    return out


def read_mix(model_dir: str | os.PathLike) -> tuple[list[float], float] | None:
    """The module's (weights, scaling) kept beside an imported model, checked against its options.json (one finite
    weight per layer, a finite scaling), or None for a model that is not one."""
    path = Path(model_dir) / MIX_NAME
    if not path.is_file():
        return None
    try:
        mix = json.loads(path.read_text(encoding="utf-8"))["mix"]
        weights, scaling = mix["weights"], mix["scaling"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelFileError(f"{path}: not the mix of a TF-Hub module ({type(e).__name__}: {e})") from None
    n_layers = read_options(Path(model_dir) / OPTIONS_NAME).n_layers
    return check_mix(weights, scaling, n_layers, str(path))


def content_key(d: Path) -> str:
    """What identifies a module's content: its graph's bytes and its variables' index, which holds every tensor's
    size and CRC32C (a data file that differs from it fails its checksum when read)."""
    digest = hashlib.sha256(f"tfhub-module-import {IMPORT_VERSION}\n".encode())
    for path in (d / SAVED_MODEL, d / (VARIABLES_PREFIX + ".index")):
        digest.update(hash_file(path).digest())
    return digest.hexdigest()[:32]


def imported_module_dir(path: str | os.PathLike, source: str | None = None) -> Path:
    """The model directory of a module folder, imported once into $ELMO_CACHE/local/tfhub-<key>/model, keyed by the
    module's content (content_key), so a touched, copied or moved module finds the same copy. Only a module that
    loads is kept; a failed import leaves nothing in the cache. The module itself is never written."""
    from filelock import FileLock

    from elmo.files.layout import cache_root

    d = Path(path)
    for required in (SAVED_MODEL, VARIABLES_PREFIX + ".index"):
        if not (d / required).is_file():
            raise ModelFileNotFound(f"{d}: not a complete TF-Hub module (no {required})")
    folder = cache_root() / "local" / f"tfhub-{content_key(d)}"
    model = folder / "model"
    if (model / MIX_NAME).is_file():
        return model
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(folder / ".lock"):
            if not (model / MIX_NAME).is_file():
                write_original(read_hub_module(d), model, overwrite=True, source=source)
    except BaseException:
        if not (model / MIX_NAME).is_file():
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return model
