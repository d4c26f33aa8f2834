#!/usr/bin/env bash
# Inputs by name: Hugging Face's BERT and Llama with a padding mask, the data file holding
# input_ids and attention_mask, matched to forward()'s arguments, and T5 (an
# encoder-decoder reading decoder_input_ids too, whose first blocks hand on two tensors).
# Each family's captured layers match its eager model's loss and gradients
# (exactness.py); each is captured from
# the command line, trained on 2 and 3 ranks under the planner's choice (every stage that
# reads the mask reads it from the data), exported, and loaded back into its own class,
# which scores the test split as pipetrain reported. Names forward() does not take are
# refused before anything runs.
# Usage: PIPETRAIN=path/to/pipetrain named_inputs_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"
. "$(dirname "$0")/families.sh"

check "the data" "$python" "$src/tests/ecosystem/make_data.py" "$tmp"
check "the masked families' layers compute forward()'s loss and gradients" "$python" \
  "$src/tests/ecosystem/exactness.py" "$tmp" hf-bert-mask hf-llama-mask hf-t5
"$python" -c "import sys; sys.path.insert(0, '$src/tests/ecosystem')
from families import NAMED
for name, (expr, data) in NAMED.items(): print(name, data, expr)" >"$tmp/families.txt"
while read -r name data expr; do
  family "$name" "$data" "$expr" </dev/null
done <"$tmp/families.txt"
# A pipeline whatever the planner would choose: three stages, each reading the mask.
check "hf-llama-mask trains on 3 stages" "$bin" train --model-file "$tmp/hf-llama-mask.pt" \
  --data-file "$tmp/fortunes_masked.pt" --nproc 3 --stage-bounds 0,2,4,6 --schedule 1f1b --microbatches 4 \
  --microbatch-size 12 --epochs 1 --max-steps 4 --export "$tmp/hf-llama-mask-3stages.pt" \
  --summary-json "$tmp/hf-llama-mask-3stages.json"
echo "hf-llama-mask fortunes_masked 3stages" >>"$tmp/exports.txt"
# T5 cut inside the decoder's first block, whose sublayers hand on two tensors each.
check "hf-t5 trains on 3 stages" "$bin" train --model-file "$tmp/hf-t5.pt" --data-file "$tmp/fortunes_seq2seq.pt" \
  --nproc 3 --stage-bounds 0,3,6,11 --schedule 1f1b --microbatches 4 --microbatch-size 12 --epochs 1 \
  --max-steps 4 --export "$tmp/hf-t5-3stages.pt" --summary-json "$tmp/hf-t5-3stages.json"
echo "hf-t5 fortunes_seq2seq 3stages" >>"$tmp/exports.txt"
check "the exports load into their classes and score as pipetrain did" "$python" \
  "$src/tests/ecosystem/score_exports.py" "$tmp"

# Names that do not match forward()'s arguments, refused in one line.
check "data with an input forward() does not take" "$python" -c "import torch
d = torch.load('$tmp/fortunes_masked.pt')
torch.save({'input_ids': d['input_ids'][:64], 'attention_mask': d['attention_mask'][:64],
            'token_type_ids': d['attention_mask'][:64] * 0, 'labels': d['labels'][:64]}, '$tmp/extra.pt')
torch.save({'input_ids': d['input_ids'][:64], 'labels': d['labels'][:64]}, '$tmp/ids_only.pt')"
refuses "the capture: a name forward() does not take" "the data holds 'token_type_ids', which forward() does not take" \
  "$python" "$capture" capture "$families:hf_llama()" --data-file "$tmp/extra.pt" --out "$tmp/x.pt"
refuses "train: a name the captured forward() does not take" \
  "the data holds 'token_type_ids', which its forward() does not take" \
  "$bin" train --model-file "$tmp/hf-llama-mask.pt" --data-file "$tmp/extra.pt" --nproc 2 --batch 32
refuses "train: a name forward() takes that the data lacks" \
  "takes 'attention_mask', which the data does not hold" \
  "$bin" train --model-file "$tmp/hf-llama-mask.pt" --data-file "$tmp/ids_only.pt" --nproc 2 --batch 32

finish "cli inputs by name"
