"""FASTA in, read by Biopython (the `[proteins]` extra), every record checked before any work: one line names the
file, the record (its number and id) and what was expected.

SeqVec's residue alphabet is its training vocabulary (Heinzinger et al. 2019, Methods): the 20 standard amino acids,
the rare U (selenocysteine) and O (pyrrolysine), and the ambiguity codes B (D or N), Z (E or Q) and X (unknown),
all upper case. The model reads any byte, so other characters would silently give vectors it never learned:
lower case (SeqVec's own `seqvec` command upper-cases; bio_embeddings only warns and embeds it as it is) and `*`
(a stop codon left by translation) are refused here, lower case with `uppercase=True` as the way out.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from elmo.errors import InputError
from elmo.files.fileio import check_file

STANDARD_RESIDUES = "ACDEFGHIKLMNPQRSTVWY"
SEQVEC_ALPHABET = frozenset(STANDARD_RESIDUES + "UOBZX")


@dataclass(frozen=True)
class Protein:
    """One FASTA record: `id` is the header's first word (bio_embeddings' `original_id`)."""

    id: str
    sequence: str
    number: int  # 1-based position in the file, for messages

    @property
    def md5(self) -> str:
        """bio_embeddings' dataset key: the md5 of the sequence."""
        return hashlib.md5(self.sequence.encode()).hexdigest()


def read_fasta(path: str | os.PathLike, uppercase: bool = False) -> list[Protein]:
    """Every record of `path` (.gz read as gzip), checked: at least one record, ids present and unique, sequences
    non-empty and within `SEQVEC_ALPHABET` (lower case upper-cased first when `uppercase`)."""
    check_file(path, "a FASTA file")
    proteins: list[Protein] = []
    seen: dict[str, int] = {}
    for protein in _records(path, uppercase):
        where = f"{os.fspath(path)}: record {protein.number} ({protein.id!r})"
        if not protein.id:
            raise InputError(f"{os.fspath(path)}: record {protein.number} has no id (expected '>ID ...' as its header)")
        if protein.id in seen:
            raise InputError(f"{where}: the id is used twice (first by record {seen[protein.id]}); ids must be unique")
        seen[protein.id] = protein.number
        if not protein.sequence:
            raise InputError(f"{where}: the sequence is empty (expected at least one residue)")
        _check_residues(protein, where, uppercase)
        proteins.append(protein)
    if not proteins:
        raise InputError(f"{os.fspath(path)}: no FASTA records (expected '>ID' header lines, each followed by its "
                         "sequence)")
    return proteins


def _records(path: str | os.PathLike, uppercase: bool) -> Iterator[Protein]:
    from Bio import SeqIO  # the [proteins] extra; imported here so `import elmo.proteins` does not need it

    opener = gzip.open if os.fspath(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, record in enumerate(SeqIO.parse(handle, "fasta"), 1):
                sequence = str(record.seq)
                yield Protein(record.id, sequence.upper() if uppercase else sequence, number)
    except UnicodeDecodeError as e:
        raise InputError(f"{os.fspath(path)}: not a FASTA file (not UTF-8 text: {e.reason} at byte {e.start})") from None
    except (OSError, EOFError) as e:  # a damaged .gz
        raise InputError(f"{os.fspath(path)}: cannot be read ({e})") from None
    except ValueError:  # Biopython: text before the first '>' header
        raise InputError(f"{os.fspath(path)}: not a FASTA file (expected a '>ID' header line before any "
                         "sequence)") from None


def _check_residues(protein: Protein, where: str, uppercase: bool) -> None:
    outside = [(i, c) for i, c in enumerate(protein.sequence, 1) if c not in SEQVEC_ALPHABET]
    if not outside:
        return
    position, char = outside[0]
    found = ", ".join(sorted({repr(c) for _, c in outside}))
    hint = ""
    if char.islower() and not uppercase:
        hint = "; lower case is not SeqVec's alphabet: --uppercase (uppercase=True) upper-cases it, as SeqVec's own " \
               "command did"
    elif char == "*":
        hint = "; '*' (a stop codon) is no residue: remove it"
    raise InputError(f"{where}: residue {position} is {char!r} (characters outside SeqVec's alphabet: {found}); "
                     f"expected one-letter codes of {STANDARD_RESIDUES} or U, O, B, Z, X{hint}")
