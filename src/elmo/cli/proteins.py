"""`elmo embed-proteins`: a FASTA file -> bio_embeddings' per-residue and per-protein HDF5 files, with SeqVec."""

from __future__ import annotations

import argparse
import sys

from . import add_model_flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("embed-proteins", help="embed a FASTA file of proteins with SeqVec into HDF5",
                       description="Write OUT/embeddings_file.h5 (per residue: (3, L, 1024) per protein), "
                       "OUT/reduced_embeddings_file.h5 (per protein: layers summed, mean over residues) and "
                       "OUT/mapping_file.csv, in bio_embeddings' layout (keys: md5 of the sequence; attribute "
                       "original_id: the FASTA id). A stopped run continues where it was (docs/proteins.md).")
    p.add_argument("fasta", help="FASTA file (.gz ok) of one-letter protein sequences")
    p.add_argument("out", help="output folder (made if absent)")
    add_model_flags(p)
    p.set_defaults(model="seqvec")
    model_flag = next(a for a in p._actions if a.dest == "model")
    model_flag.help = model_flag.help.replace("(default: the bundled model)", "(default: seqvec, from the catalog)")
    p.add_argument("--stateless", action="store_true",
                   help="every protein from zero state (its vectors depend on it alone); default: AllenNLP 0.9's "
                   "carried state after bio_embeddings' warm-up, as SeqVec's published vectors were made")
    p.add_argument("--warmup-rounds", type=int, default=4, help="bio_embeddings' warm-up embeddings (default 4)")
    p.add_argument("--max-amino-acids", type=int, default=None,
                   help="residues per batch, bio_embeddings' max_amino_acids (default 15000)")
    p.add_argument("--simple-remapping", action="store_true", help='keys "0", "1", ... (longest first), not md5s')
    p.add_argument("--no-per-residue", dest="per_residue", action="store_false",
                   help="write only the per-protein file (bio_embeddings' discard_per_amino_acid_embeddings)")
    p.add_argument("--uppercase", action="store_true", help="upper-case lower-case residues (SeqVec's own command did)")
    p.add_argument("--overwrite", action="store_true", help="replace finished files already in OUT")
    p.add_argument("--int8", action="store_true", help="int8 matrix products on the CPU (faster, approximate)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the usable CPUs)")
    p.set_defaults(func=run_embed_proteins)


def run_embed_proteins(args: argparse.Namespace) -> int:
    from elmo.files.output_paths import check_not_input
    from elmo.model.threads import set_threads
    from elmo.models import resolve
    from elmo.proteins.pipeline import embed_fasta
    from elmo.proteins.seqvec import SeqVecEmbedder

    check_not_input(args.out, {"FASTA": args.fasta, "--options": args.options, "--weights": args.weights},
                    flag="OUT", folder=True)
    set_threads(args.threads, flag="--threads")
    files = resolve(args.model if args.options is None else None, args.options, args.weights).original_files()
    embedder = SeqVecEmbedder(args.warmup_rounds, options_file=files.options_file, weights_file=files.weight_file,
                              device=args.device, stateful=not args.stateless, int8=args.int8)
    counts = embed_fasta(embedder, args.fasta, args.out, max_amino_acids=args.max_amino_acids,
                         simple_remapping=args.simple_remapping, per_residue=args.per_residue, uppercase=args.uppercase,
                         model_name=args.model if args.options is None else f"{args.options} + {args.weights}",
                         progress=sys.stderr.isatty(), overwrite=args.overwrite)
    print(f"{args.out}: {counts['proteins']:,} proteins, {counts['residues']:,} residues", file=sys.stderr)
    return 0
