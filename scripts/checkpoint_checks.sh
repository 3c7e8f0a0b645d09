#!/usr/bin/env bash
# Issue #25's checks on one checkpoint of a run still training: the valid-1k perplexity (added to
# CURVES.jsonl and CURVES.png), then the exported checkpoint's sense checks (the hand-written
# homonyms, the held-out set, SemCor's 57 words, the lab's presets with "bank"). The checkpoint is
# copied to SCRATCH first, so the run's rotation cannot delete it mid-way, and the script lowers its
# own scheduling group, so it takes only the cores' idle moments beside the training
# (docs/training.md, "Side jobs beside the run"). Minutes each on a busy 2-core machine.
#   bash scripts/checkpoint_checks.sh RUN_DIR STEP CURVES SCRATCH
#   e.g. bash scripts/checkpoint_checks.sh ../runs/default-v3 9209 docs/default-model/curves-v3 ../runs/check
set -euo pipefail
run=${1:?usage: $0 RUN_DIR STEP CURVES SCRATCH}; step=${2:?STEP}; curves=${3:?CURVES}; scratch=${4:?SCRATCH}
here=$(cd "$(dirname "$0")/.." && pwd)
data=${ELMO_SHARED:-$here/../shared}/data
echo 19 > /proc/self/autogroup 2>/dev/null || renice -n 19 $$ >/dev/null
snap=$scratch/snap/$(basename "$run")
ckpt=$(printf "ckpt-%09d.pt" "$step")
rm -rf "$snap"; mkdir -p "$snap/checkpoints"
cp "$run"/options.json "$run"/vocab.txt "$run"/run.json "$snap"/
cp "$run/checkpoints/$ckpt" "$snap/checkpoints/"
python "$here/scripts/default_model_curves.py" "$snap" --valid "$data/wiki_corpus/valid.txt" --lines 1000 \
    --out "$curves" --threads 1
elmo export "$snap" --checkpoint "$snap/checkpoints/$ckpt" -o "$scratch/export-$step" --overwrite
export OMP_NUM_THREADS=1
python "$here/scripts/sense_check.py" --model "$scratch/export-$step" --set "$here/tests/data/homonyms.json"
python "$here/scripts/sense_check.py" --model "$scratch/export-$step" --set "$here/tests/data/homonyms_heldout.json"
python "$here/scripts/sense_check.py" --model "$scratch/export-$step" \
    --semcor "$data/wsd_raganato/Training_Corpora/SemCor" --lab-examples
