#!/usr/bin/env bash
# `make demo`: bertkit's main job end to end, offline, on the bundled demo data (400 original sentences) with
# the packaged MiniLM encoder: tokens report -> embed -> probe (baselines, layer curve) -> short fine-tune ->
# predict -> evaluate -> bench -> distill. A few minutes on 2 CPU cores. Outputs go to runs/demo/ (override with DEMO_OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
BK="${BERTKIT:-.venv/bin/bertkit}"
OUT="${DEMO_OUT:-runs/demo}"
DEMO=bertkit/resources/demo
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Write only into a folder an earlier demo made (it leaves this marker): never a folder DEMO_OUT points at by
# mistake. The marker only lets the demo in; nothing is deleted on its word: each command replaces its own
# earlier run with --overwrite, which bertkit does only for the files its records say it wrote.
MARKER=.bertkit-demo
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && [ ! -f "$OUT/$MARKER" ]; then
  echo "error: $OUT exists and was not made by make demo (no $OUT/$MARKER); set DEMO_OUT to a new folder." >&2
  exit 2
fi
mkdir -p "$OUT"
touch "$OUT/$MARKER"
STARTED=$SECONDS
STEP_STARTED=
step() {  # prints how long the step before took, then the next step's heading
  [ -n "$STEP_STARTED" ] && printf '\033[2m   (step took %d s)\033[0m\n' $((SECONDS - STEP_STARTED))
  STEP_STARTED=$SECONDS
  printf '\n\033[1m== %s\033[0m\n' "$*"
}

step "1/8 tokens: how BERT's tokenizer sees the demo data"
"$BK" tokens --model minilm-offline --data $DEMO/train.tsv --dev $DEMO/dev.tsv --max-length 64 --out "$OUT/tokens" --overwrite --quiet
"$BK" tokens --model minilm-offline --text "A gorgeous, witty, seductive movie." --quiet

step "2/8 embed: [CLS] features of every layer into a resumable store"
"$BK" embed --model minilm-offline --data $DEMO/train.tsv --dev $DEMO/dev.tsv --layers all --pool cls \
  --max-length 64 --out "$OUT/features" --overwrite

step "3/8 probe: logistic regression per layer on the stored features, with baselines"
"$BK" probe --features "$OUT/features" --layers all --out "$OUT/probe" --overwrite

step "4/8 finetune: MiniLM + classification head, 4 epochs"
"$BK" finetune --model minilm-offline --data $DEMO/train.tsv --dev $DEMO/dev.tsv --epochs 4 --batch-size 16 \
  --warmup-ratio 0.1 --max-length 64 --out "$OUT/finetune" --overwrite

step "5/8 predict: new sentences and a file"
"$BK" predict --model "$OUT/finetune/best" --text "An absolute delight from start to finish." \
  --text "A tedious, joyless slog that I regret paying for." --quiet
"$BK" predict --model "$OUT/finetune/best" --data $DEMO/dev.tsv --out "$OUT/predictions.csv"

step "6/8 evaluate: the fine-tuned model on the dev set"
"$BK" evaluate --model "$OUT/finetune/best" --data $DEMO/dev.tsv

step "7/8 bench: speed and size of the encoder"
"$BK" bench --models minilm-offline --data $DEMO/dev.tsv --batch-sizes 1,32 --min-seconds 1 --out "$OUT/bench" --overwrite

step "8/8 distill: a 3-layer student of the fine-tuned model, and DistilBERT's claims measured on it"
"$BK" distill --teacher "$OUT/finetune/best" --data $DEMO/train.tsv --dev $DEMO/dev.tsv --student-layers 3 \
  --alpha 0.9 --cos-weight 1 --epochs 4 --batch-size 16 --max-length 64 --out "$OUT/distill" --overwrite

step "done in $((SECONDS - STARTED)) s — outputs"
for path in "$OUT/tokens/token_lengths.png" "$OUT/features" "$OUT/probe" "$OUT/finetune/best" \
            "$OUT/finetune/metrics.json" "$OUT/predictions.csv" "$OUT/bench/bench.md" "$OUT/distill/distill_report.md"; do
  printf '  %s\n' "$path"
done
