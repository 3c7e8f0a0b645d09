#!/bin/bash
# The GPU checks in one call: CUDA tests, the speed benchmark on CUDA, then the PTB benchmark for
# whatever time is left (its log says how far it got). Results go to $OUT (default: gpu-results/).
#
#   benchmarks/gpu_check.sh bundle        # here: copy the shared files the checks read into .gpu/shared
#   benchmarks/gpu_check.sh run [SECONDS] # on the GPU machine, from the repo root (default budget 535 s)
#
# `bundle` exists because a GPU machine may get only the checkout: ELMO_SHARED points the tests and
# benchmarks at the copy (fixtures, wiki valid/test, PTB: about 10 MB). Add /.gpu/ to .git/info/exclude.
set -u
case "${1:-}" in
bundle)
  src="$(dirname "$0")/../../shared"
  mkdir -p .gpu/shared/data/wiki_corpus
  cp -r "$src/fixtures" .gpu/shared/ && cp -r "$src/data/ptb_mikolov" .gpu/shared/data/ &&
    cp "$src/data/wiki_corpus/valid.txt" "$src/data/wiki_corpus/test.txt" .gpu/shared/data/wiki_corpus/
  du -sh .gpu ;;
run)
  budget=${2:-535}
  OUT=${OUT:-gpu-results}; mkdir -p "$OUT"
  export ELMO_SHARED=${ELMO_SHARED:-$PWD/.gpu/shared} PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
  start=$(date +%s)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  timeout -k 5 110 python3 -m pytest tests/test_cuda.py tests/test_fixtures.py -q -p no:cacheprovider -rs 2>&1 \
    | tail -40 > "$OUT/pytest.txt"; tail -5 "$OUT/pytest.txt"
  timeout -k 5 250 python3 benchmarks/speed.py --device cuda --threads 4 --precisions fp32,bf16 \
    --shapes small,original --train-shapes tiny,small,original --passes 5 --out "$OUT/speed-cuda.json" 2>&1 \
    | tee "$OUT/speed.txt" | tail -30
  left=$(( budget - ($(date +%s) - start) ))
  run=runs/ptb-gpu  # ignored by git: checkpoints stay out of the repo
  timeout -k 5 "$left" python3 benchmarks/ptb_char_small.py --out "$run" --threads 4 --device cuda > "$OUT/ptb.txt" 2>&1
  cp "$run/benchmark.jsonl" "$OUT/ptb-benchmark.jsonl" 2>/dev/null; cp "$run/metrics.jsonl" "$OUT/ptb-metrics.jsonl"
  echo "done in $(( $(date +%s) - start )) s" ;;
*) sed -n 2,9p "$0"; exit 2 ;;
esac
