"""bilm-tf's own test() perplexity of tests/data/tf/bilm-run on tests/data/tf/heldout.txt at several batch sizes, and
how many targets it scored: the reference for `elmo perplexity --bilm-tf-batches` (issue #66 item 10).

Runs in the TensorFlow peer venv (../shared/tools/tensorflow-peer-venv.sh), never in the package's:

    TF_USE_LEGACY_KERAS=1 $TF_VENV/bin/python scripts/bilm_tf_batches.py --bilm-tf BILM_TF_CHECKOUT

Writes tests/data/tf/bilm-tf-batches.json: {batch size: {"perplexity", "targets"}}, the targets being the batches
bilm-tf's test() ran times the batch size (its batcher drops the batch in which the text runs out).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import tensorflow as tf
from make_tf_references import FIXTURE, import_bilm, until_stop

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "tf"
BATCH_SIZES = (1, 2, 3)


def bilm_tf_figure(training, data, batch_size: int) -> dict:
    options, ckpt = training.load_options_latest_checkpoint(str(DATA / "bilm-run"))
    vocab = training.load_vocab(str(FIXTURE / "vocab.txt"), 50)
    test_data = data.BidirectionalLMDataset(str(DATA / "heldout.txt"), vocab, test=True, shuffle_on_load=False)
    batches = until_stop(test_data.iter_batches)
    ran = []

    def counted(*args, **kwargs):
        for batch in batches(*args, **kwargs):
            ran.append(batch)
            yield batch

    test_data.iter_batches = counted
    perplexity = float(training.test(options, ckpt, test_data, batch_size=batch_size))
    tf.compat.v1.reset_default_graph()
    return {"perplexity": perplexity, "targets": len(ran) * batch_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bilm-tf", type=Path, required=True, help="a checkout of github.com/allenai/bilm-tf")
    args = parser.parse_args()
    training, data = import_bilm(args.bilm_tf)
    figures = {str(n): bilm_tf_figure(training, data, n) for n in BATCH_SIZES}
    figures["tensorflow"] = tf.__version__
    (DATA / "bilm-tf-batches.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
