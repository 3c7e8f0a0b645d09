#!/usr/bin/env bash
# Ship a document fine-tune (docs/documents.md's recipe) as the bundled `default-document` model (#55 item 5):
# export as the bundled default is (every weight float16), score it on the test documents in both modes, and
# keep the run's log and run file beside the docs. Each step's command is what the docs quote beside its numbers.
#   bash scripts/ship_document_model.sh RUN_DIR TEST_DOCS     (TEST_DOCS: scripts/wiki_documents.py ... test FILE)
set -euo pipefail
run=${1:?usage: $0 RUN_DIR TEST_DOCS}
test_docs=${2:?usage: $0 RUN_DIR TEST_DOCS}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
elmo export "$run" -o src/elmo/bundled/default-document --float16 --overwrite
du -sh src/elmo/bundled/*
cp "$run/metrics.jsonl" "$run/run.json" docs/document-model/
out=benchmarks/results/document-model
mkdir -p "$out"
pids=()
for mode in sentence document; do   # one core each when two are free: the two modes run side by side
  (elmo perplexity default-document --test "$test_docs" --mode "$mode" --threads 1 --json --no-progress \
      > "$out/default-document-test-$mode.json.tmp" && mv "$out/default-document-test-$mode.json.tmp" \
      "$out/default-document-test-$mode.json") &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done   # set -e: a failed scoring fails the script
cat "$out"/default-document-test-*.json
