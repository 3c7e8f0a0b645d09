"""Every `elmo embed` without `--stateful`, in one process or many under torchrun: line-range parts, then joined.

The input is cut into blocks of `part_lines` lines. Each block becomes one part file,
`OUTPUT.parts/lines-<start>-<end>.h5`, written atomically, with the datasets of its lines keyed by
line number and a header attribute naming the model (a hash of its weights), the input (a hash of
its bytes) and the output settings. Rank 0 plans which blocks are missing, every rank embeds its
contiguous share of them, and rank 0 joins all parts, in line order, into one HDF5 in the layout of
docs/format.md 6.2. A crash loses at most the block each rank was writing; `resume=True` keeps the finished
parts, after checking that they come from the same model, input and settings.

With document context (`context="document"`) a block ends only at a document break, so every
document is embedded whole by one rank. Each block is embedded from its first line, so the batches, and therefore the vectors to the last
bit, do not depend on how many ranks ran it. Memory is bounded by the block, the batch and one line's
output (a line longer than a window runs in windows, `elmo.embed.long_lines`; `LineLimits` caps a line), except
the `sentence_to_index` dict built during the join (one key of bounded length per distinct sentence).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import h5py
import torch.distributed as dist
from tqdm import tqdm

from elmo.errors import ElmoError, InputError, OutputError
from elmo.files.fileio import hash_file, hdf5_output, output_lock
from elmo.files.hdf5_files import open_hdf5
from elmo.formats.fingerprints import model_fingerprint
from elmo.model.devices import TorchrunPlace

from .documents import check_context, check_document_length, is_document_break
from .embedder import Embedder, check_batch_size
from .input_file import EmbedInput, LineLimits
from .long_lines import embed_lines
from .output_file import (
    OutputSpec,
    check_output,
    check_sentence_key,
    index_key,
    link_plist,
    remove_temporaries,
    write_index,
)

PART_ATTR = "elmo_part"
PART_FORMAT = 1
T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place among the torchrun workers (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world: int = 1

    @classmethod
    def from_env(cls) -> Ranks:
        """Read torchrun's RANK/WORLD_SIZE; with several ranks, join a gloo group (CPU is enough)."""
        place = TorchrunPlace.from_env()
        place.join("gloo", timeout=timedelta(hours=72))  # ranks wait for each other only at the join, for hours maybe
        return cls(place.rank, place.world)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def from_rank0(self, make: Callable[[], T]) -> T:
        """Rank 0 runs `make`; every rank gets its result, or raises rank 0's error."""
        if self.world == 1:
            return make()
        box: list = [None]
        if self.rank == 0:
            try:
                box[0] = (True, make())
            except ElmoError as e:
                box[0] = (False, e)
            except BaseException as e:  # e.g. OSError: the other ranks must not wait for gloo's timeout
                box[0] = (False, ElmoError(f"rank 0 failed: {type(e).__name__}: {e}"))
                dist.broadcast_object_list(box, src=0)
                raise
        dist.broadcast_object_list(box, src=0)
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


@dataclass
class Plan:
    """What to embed: all blocks (start, end), their token counts, and the ones still missing."""

    parts_dir: str
    header: dict
    blocks: list[tuple[int, int]]
    tokens: list[int]
    todo: list[int]
    source: EmbedInput | None = None  # INPUT, its state when planned and its line limits

    @property
    def n_lines(self) -> int:
        return self.header["input"]["lines"]

    @property
    def part_lines(self) -> int:
        return self.header["settings"]["part_lines"]

    @property
    def context(self) -> str:
        """"sentence" (absent from the header, so older parts still resume) or "document"."""
        return self.header["settings"].get("context", "sentence")

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [start for start, _ in self.blocks]

    def block_of(self, number: int) -> int:
        """The block that holds line `number` (blocks of documents differ in length)."""
        return bisect.bisect_right(self._starts, number) - 1

    def part_path(self, block: int) -> str:
        start, end = self.blocks[block]
        return os.path.join(self.parts_dir, part_name(start, end))

    def share(self, rank: int, world: int) -> list[int]:
        """A contiguous run of `todo` for this rank, balanced by tokens + lines (both cost time)."""
        weights = [self.tokens[b] + self.blocks[b][1] - self.blocks[b][0] for b in self.todo]
        total, done, mine = sum(weights), 0, []
        for block, weight in zip(self.todo, weights):
            if min(world - 1, int((done + weight / 2) * world / total)) == rank:
                mine.append(block)
            done += weight
        return mine


def part_name(start: int, end: int) -> str:
    return f"lines-{start:012d}-{end:012d}.h5"


def parts_dir_of(output_file: str) -> str:
    return output_file + ".parts"


def scan_input(source: EmbedInput, part_lines: int, use_sentence_keys: bool,
               context: str = "sentence") -> tuple[dict, list[tuple[int, int]], list[int]]:
    """One pass over INPUT: its sha256 and line count, the blocks with their token counts.

    Invalid UTF-8, a line over the source's limits, and with `use_sentence_keys` an empty or repeated sentence, is an
    error naming the line before any work is done (the set of sentences is kept only in that mode). With context
    "document" a block starts only at a document break, once the block before holds `part_lines`
    lines, so no document is split between parts; a document that is too long is an error.
    """
    blocks, tokens, seen = [], [], set()
    in_document = 0  # sentence lines since the last document break
    path = source.path
    for number, text in source.lines():
        words = len(text.split())
        source.check_tokens(words, number)
        if context == "sentence":
            starts = number % part_lines == 0
        else:
            in_document = 0 if is_document_break(text) else in_document + 1
            check_document_length(in_document, path, number)
            starts = not blocks or (in_document == 0 and number - blocks[-1][0] >= part_lines)
            if in_document == 0:
                words = 0  # a -DOCSTART- line is no sentence: it gets no vectors
        if starts:
            blocks.append((number, number))
            tokens.append(0)
        blocks[-1] = (blocks[-1][0], number + 1)
        tokens[-1] += words
        if use_sentence_keys:
            check_sentence_key(seen, text.strip(), path, number)
            seen.add(text.strip())
    return {"sha256": hash_file(path).hexdigest(), "lines": blocks[-1][1] if blocks else 0}, blocks, tokens



def make_plan(embedder: Embedder, input_file: str, output_file: str, spec: OutputSpec, part_lines: int,
              use_sentence_keys: bool, overwrite: bool, resume: bool, context: str = "sentence",
              limits: LineLimits | None = None) -> Plan:
    """Check INPUT and OUTPUT, prepare OUTPUT.parts/, and list the blocks still to embed (rank 0 only)."""
    if part_lines <= 0:
        raise InputError(f"--part-lines must be positive, found {part_lines}")
    spec.check_model(embedder.bilm.num_layers)
    source = EmbedInput.open(input_file, limits)
    check_output(output_file, overwrite, source.path)
    remove_temporaries(output_file)  # a killed join's OUTPUT-sized temporary (OUTPUT's lock is held)
    input_id, blocks, tokens = scan_input(source, part_lines, use_sentence_keys, check_context(context))
    settings = {**spec.settings(), "part_lines": part_lines}
    if context != "sentence":  # sentence-mode headers stay as they were, so their parts still resume
        settings["context"] = context
    header = {"format": PART_FORMAT, "model": model_fingerprint(embedder.bilm), "input": input_id, "settings": settings}
    plan = Plan(parts_dir_of(output_file), header, blocks, tokens, list(range(len(blocks))), source)
    source.check_unchanged()  # not edited while it was hashed
    if os.path.isdir(plan.parts_dir):
        if resume:
            remove_leftovers(plan.parts_dir, output_file)
            plan.todo = [b for b in plan.todo if not part_is_done(plan, b)]
        elif overwrite:
            remove_parts(plan.parts_dir)
        else:
            raise InputError(f"{plan.parts_dir}: holds the parts of an earlier, unfinished run; pass --resume to "
                             "continue it, or --overwrite to start over")
    elif os.path.exists(plan.parts_dir):
        raise InputError(f"{plan.parts_dir}: exists and is not a directory; it is where the parts of OUTPUT go")
    check_free_space(plan, spec, embedder, output_file)
    os.makedirs(plan.parts_dir, exist_ok=True)
    return plan


def megabytes(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def check_free_space(plan: Plan, spec: OutputSpec, embedder: Embedder, output_file: str) -> None:
    """Refuse at once a run whose parts cannot fit beside OUTPUT (uncompressed output only).

    The missing parts, plus one part's worth for the join (which, when space is short, removes each
    part once it is copied: see `join_keeps_parts`).
    """
    def estimate(blocks: list[int]) -> int:
        lines = sum(plan.blocks[b][1] - plan.blocks[b][0] for b in blocks)
        tokens = sum(plan.tokens[b] for b in blocks)
        return spec.estimate_bytes(embedder.bilm.num_layers, embedder.bilm.output_dim(), lines, tokens) or 0

    parts = estimate(plan.todo)
    largest = max((estimate([b]) for b in range(len(plan.blocks))), default=0)
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(output_file))).free
    if parts + largest > free:
        raise OutputError(f"{output_file}: needs at least {megabytes(parts + largest)} free beside it "
                          f"({megabytes(parts)} of parts, and {megabytes(largest)} to join them), {megabytes(free)} "
                          "are free; free space, write OUTPUT elsewhere, or store less (--dtype float16, --layers, "
                          "--top, --pool)")


def join_keeps_parts(plan: Plan, output_file: str) -> bool:
    """Whether the join can keep every part until OUTPUT is complete (it is about their size).

    If not, each part is removed as soon as its lines are copied, so the join needs one part's worth
    of space, not OUTPUT's; the price is that a join that fails then must re-embed the parts it had
    copied (--resume does). Neither fits: an error, with the parts kept.
    """
    sizes = [os.path.getsize(plan.part_path(b)) for b in range(len(plan.blocks))]
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(output_file))).free
    if sum(sizes) <= free:
        return True
    need = int(1.1 * max(sizes, default=0)) + (64 << 10)  # HDF5 overhead differs a little between files
    if need <= free:
        return False
    raise OutputError(f"{output_file}: joining the parts needs at least {megabytes(need)} free beside it, "
                      f"{megabytes(free)} are free; the finished parts are kept in {plan.parts_dir}: free space "
                      "and run the same command with --resume to join them")


def part_is_done(plan: Plan, block: int) -> bool:
    """True for a finished part from this model, input and settings; any other part is an error."""
    path = plan.part_path(block)
    if not os.path.exists(path):
        return False
    try:
        with open_hdf5(path, "part file of `elmo embed`", InputError) as f:  # nothing read from other files
            found = json.loads(f.attrs[PART_ATTR])
    except ElmoError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise InputError(f"{path}: not a part file of `elmo embed` ({e}); remove it, or pass --overwrite "
                         "without --resume to start over") from None
    expected = {**plan.header, "lines": list(plan.blocks[block])}
    restart = "resume with the same model, input and options, or pass --overwrite without --resume to start over"
    if found.get("model") != expected["model"]:
        raise InputError(f"{path}: written by another model (weights sha256 {str(found.get('model'))[:12]}…, this "
                         f"run's model {expected['model'][:12]}…); {restart}")
    if found.get("input") != expected["input"]:
        raise InputError(f"{path}: written for another INPUT ({found.get('input')}, this run's input is "
                         f"{expected['input']}); {restart}")
    theirs, ours = found.get("settings", {}), expected["settings"]
    differ = [f"{k}={theirs.get(k)!r} there, {ours.get(k)!r} now" for k in sorted(set(theirs) | set(ours))
              if theirs.get(k) != ours.get(k)]
    if differ:
        raise InputError(f"{path}: written with other settings ({'; '.join(differ)}); {restart}")
    if found != expected:
        raise InputError(f"{path}: its header {found} does not match this run's {expected}; {restart}")
    return True


def remove_leftovers(parts_dir: str, output_file: str) -> None:
    """Temporary files of a killed run: unfinished parts, and an unfinished join of OUTPUT."""
    remove_temporaries(output_file)
    for name in os.listdir(parts_dir):
        if name.startswith(".lines-") and name.endswith(".tmp"):
            os.remove(os.path.join(parts_dir, name))


def remove_parts(parts_dir: str) -> None:
    """Remove the part files (finished or not) and the folder if nothing else is in it."""
    for name in os.listdir(parts_dir):
        if (name.startswith("lines-") and name.endswith(".h5")) or (name.startswith(".lines-") and name.endswith(".tmp")):
            os.remove(os.path.join(parts_dir, name))
    with contextlib.suppress(OSError):  # someone else's file is in there; leave it
        os.rmdir(parts_dir)


def write_parts(embedder: Embedder, plan: Plan, blocks: list[int], spec: OutputSpec, batch_size: int,
                bar: tqdm) -> None:
    """Embed `blocks` (sorted) in one pass over INPUT, one atomically written part file per block."""
    todo = set(blocks)
    for block, lines in itertools.groupby(plan.source.lines(), key=lambda item: plan.block_of(item[0])):
        if not todo:
            break
        if block not in todo:
            continue
        start = plan.blocks[block][0]
        embedder.bilm.token_cache.clear()  # a block's numbers must not depend on the blocks run before it
        with hdf5_output(plan.part_path(block), spec.libver) as (out, check_written):
            out.attrs[PART_ATTR] = json.dumps({**plan.header, "lines": list(plan.blocks[block])})
            arrays = embed_lines(embedder, list(lines), batch_size, plan.context, plan.source.path)
            for i, vectors in enumerate(arrays):
                spec.write(out, str(start + i), vectors)
                check_written()
                bar.update(vectors.shape[1])
        todo.discard(block)


def join_parts(output_file: str, plan: Plan, spec: OutputSpec, forget_sentences: bool, use_sentence_keys: bool,
               progress: bool) -> None:
    """Copy every line's dataset, in line order, from the parts into OUTPUT (atomically), then drop the parts."""
    missing = [plan.part_path(b) for b in range(len(plan.blocks)) if not os.path.exists(plan.part_path(b))]
    if missing:
        raise InputError(f"{missing[0]}: missing ({len(missing)} part(s) in all) after every rank finished; with "
                         "several nodes, OUTPUT must be on a filesystem that all of them share")
    keep_parts = join_keeps_parts(plan, output_file)
    if not keep_parts:
        tqdm.write("elmo embed: too little space to keep the parts until OUTPUT is complete; each part is removed "
                   "once it is copied (if the join fails, --resume re-embeds those)", file=sys.stderr)
    plan.source.check_unchanged()
    keep_index = not (forget_sentences or use_sentence_keys)
    texts: dict[str, str] = {}
    part, open_block = None, -1
    bar = tqdm(total=plan.n_lines, unit="line", unit_scale=True, desc="joining",
               disable=not progress, dynamic_ncols=True)
    try:
        with bar, hdf5_output(output_file, spec.libver) as (out, check_written):
            for number, text in plan.source.lines():
                if (block := plan.block_of(number)) != open_block:
                    if part is not None:
                        part.close()
                        if not keep_parts:  # its lines are in OUTPUT now
                            os.remove(plan.part_path(open_block))
                    part, open_block = h5py.File(plan.part_path(block), "r"), block
                sentence = text.strip()
                key = sentence if use_sentence_keys else str(number)
                try:
                    h5py.h5o.copy(part.id, str(number).encode(), out.id, key.encode(), lcpl=link_plist())
                except (KeyError, ValueError, RuntimeError) as e:
                    raise InputError(f"{plan.source.path}, line {number + 1}: cannot store the sentence {key!r} as an "
                                     f"HDF5 key ({e}); drop --use-sentence-keys to key by line number") from None
                check_written()
                if keep_index:
                    texts[index_key(sentence)] = key
                bar.update()
            if keep_index:
                write_index(out, texts)
            plan.source.check_unchanged()  # OUTPUT is renamed into place only after this
    finally:
        if part is not None:
            part.close()
    remove_parts(plan.parts_dir)


def embed_corpus(embedder: Embedder, input_file: str | os.PathLike, output_file: str | os.PathLike,
                 spec: OutputSpec = OutputSpec(), batch_size: int = 64, forget_sentences: bool = False,
                 use_sentence_keys: bool = False, overwrite: bool = False, resume: bool = False,
                 part_lines: int = 10_000, progress: bool = True, ranks: Ranks = Ranks(),
                 context: str = "sentence", limits: LineLimits | None = None) -> None:
    """`elmo embed` for a stateless embedder: plan, embed this rank's share of the parts, join on rank 0.

    Call it on every rank with the same arguments (torchrun); without torchrun, `ranks` is rank 0 of 1.
    `context`: see `long_lines.embed_lines`; in "document" mode parts are cut between documents only.
    `limits`: the longest line allowed (`embed_input.LineLimits`), checked by number before any line is embedded.
    """
    input_file, output_file = os.fspath(input_file), os.fspath(output_file)
    check_batch_size(batch_size)
    if embedder.stateful:
        raise InputError("parts, ranks and --resume need a stateless embedder: with state carried between "
                         "batches every line depends on all earlier ones, so a run cannot be split or continued")
    with contextlib.ExitStack() as held:
        def locked_plan() -> Plan:  # rank 0 holds OUTPUT's lock for the whole run: one writer per output
            held.enter_context(output_lock(output_file))
            return make_plan(embedder, input_file, output_file, spec, part_lines, use_sentence_keys, overwrite,
                             resume, context, limits)

        plan = ranks.from_rank0(locked_plan)
        try:
            embed_plan(embedder, output_file, plan, spec, batch_size, forget_sentences, use_sentence_keys, progress,
                       ranks)
        except BaseException:
            if ranks.rank == 0:
                with contextlib.suppress(OSError):  # no finished part to resume from: leave nothing behind
                    os.rmdir(plan.parts_dir)
            raise


def embed_plan(embedder: Embedder, output_file: str, plan: Plan, spec: OutputSpec, batch_size: int,
               forget_sentences: bool, use_sentence_keys: bool, progress: bool, ranks: Ranks) -> None:
    """This rank's share of the missing parts, then (rank 0) the join."""
    part_lines = plan.part_lines
    mine = plan.share(ranks.rank, ranks.world) if plan.todo else []
    show = progress and ranks.rank == 0
    if show:
        done = len(plan.blocks) - len(plan.todo)
        todo_lines = sum(plan.blocks[b][1] - plan.blocks[b][0] for b in plan.todo)
        size = f"up to {part_lines}" if plan.context == "sentence" else f"about {part_lines} (cut between documents)"
        tqdm.write(f"elmo embed: {plan.n_lines} lines in {len(plan.blocks)} part(s) of {size} lines; "
                   f"{done} already written; embedding {todo_lines} lines on {ranks.world} rank(s)", file=sys.stderr)
    desc = "embedding" if ranks.world == 1 else f"embedding (rank 0 of {ranks.world})"
    with tqdm(total=sum(plan.tokens[b] for b in mine), unit="tok", unit_scale=True, desc=desc, disable=not show,
              dynamic_ncols=True) as bar:
        write_parts(embedder, plan, mine, spec, batch_size, bar)
    if show and ranks.world > 1:
        tqdm.write("elmo embed: rank 0's parts are written; waiting for the other ranks", file=sys.stderr)
    ranks.barrier()
    if ranks.rank == 0:
        join_parts(output_file, plan, spec, forget_sentences, use_sentence_keys, progress)

