"""`elmo import-tf`: a bilm-tf TensorFlow checkpoint as a model directory (elmo.tf.bilm_import), without TensorFlow."""

from __future__ import annotations

import argparse
import glob


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import-tf", help="write a bilm-tf checkpoint (with its softmax) or a TF-Hub module as a model directory",
        description="Read a TensorFlow checkpoint written by bilm-tf's training (model.ckpt-N.index + .data-*) and "
        "write OUT in the original format: options.json (for prediction), weights.hdf5 (as bilm-tf's dump_weights "
        "writes it), softmax.hdf5 and vocab.txt, so `elmo perplexity OUT`, `elmo train --init-from OUT` and the "
        "lab's word predictions work on it. Or read a TF-Hub ELMo module (a folder, its .tar.gz, a handle such as "
        "https://tfhub.dev/google/elmo/3) and write options.json, weights.hdf5 and tfhub_module.json, the module's "
        "layer mix (docs/tensorflow.md). TensorFlow is not needed.")
    p.add_argument("checkpoint", metavar="CKPT_PREFIX|MODULE",
                   help="the checkpoint's prefix (model.ckpt-N) or one of its files, or a bilm-tf run directory "
                   "(its `checkpoint` file names the newest); or a TF-Hub module")
    p.add_argument("output", metavar="OUT", help="model directory to write")
    p.add_argument("--options", help="the options.json it was trained with (default: the one beside the checkpoint)")
    p.add_argument("--vocab", help="its training vocabulary, one word per softmax row (default: vocab.txt beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace the model files of an existing OUT")
    p.set_defaults(func=run_import_tf)


def hub_module_folder(reference: str):
    """The local folder of a TF-Hub module reference (folder, handle, catalog name), or None (archives: run_import_tf)."""
    from elmo.hub import find_published
    from elmo.tf.hub_handles import fetch_tfhub_module, parse_handle
    from elmo.tf.hub_import import is_hub_module

    published = find_published(reference)
    handle = parse_handle(published.archive.url if published is not None and published.format == "tfhub" else reference)
    if is_hub_module(reference):
        return reference
    return None if handle is None else fetch_tfhub_module(handle)


def run_import_module(args: argparse.Namespace, folder, source: str | None = None) -> int:
    """OUT from a module folder; it is loaded before it is renamed into place (write_original), so "wrote" means
    it loads."""
    from elmo.errors import InputError
    from elmo.tf.hub_import import MIX_NAME, read_hub_module, write_original

    if args.options or args.vocab:
        raise InputError("--options and --vocab are for bilm-tf checkpoints; a TF-Hub module carries its architecture")
    module = read_hub_module(folder)
    out = write_original(module, args.output, overwrite=args.overwrite, source=source)
    print(f"wrote {out} from the TF-Hub module {source or folder}: options.json, weights.hdf5 and {MIX_NAME} (mix "
          f"weights {[round(w, 6) for w in module.mix_weights]}, scaling {module.scaling:.6g})")
    return 0


def run_import_tf(args: argparse.Namespace) -> int:
    from pathlib import Path

    from elmo.errors import ModelFileError
    from elmo.files.output_paths import check_not_input
    from elmo.tf.bilm_import import find_bilm_checkpoint, import_bilm_checkpoint
    from elmo.tf.hub_handles import archive_error, extracted_module_archive, is_module_archive

    sources = [args.checkpoint, glob.escape(args.checkpoint) + "*"]  # a folder, a file, a checkpoint's prefix
    check_not_input(args.output, {"CKPT_PREFIX|MODULE": sources, "--options": args.options, "--vocab": args.vocab},
                    flag="OUT", folder=True)
    if is_module_archive(args.checkpoint):  # unpacked into a temporary folder, removed afterwards
        with extracted_module_archive(args.checkpoint) as folder:
            try:
                return run_import_module(args, folder, source=args.checkpoint)
            except ModelFileError as e:
                raise archive_error(e, folder, Path(args.checkpoint)) from None
    folder = hub_module_folder(args.checkpoint)
    if folder is not None:
        return run_import_module(args, folder)

    source = find_bilm_checkpoint(args.checkpoint, args.options, args.vocab)
    out = import_bilm_checkpoint(source, args.output, overwrite=args.overwrite)
    print(f"wrote {out} from {source.prefix} (options {source.options_file}, vocabulary {source.vocab_file})")
    if source.vocab_file is None:
        print("no vocabulary given: vectors work; to score text pass the training vocabulary to `elmo perplexity "
              "--vocab`, or import again with --vocab")
    return 0
