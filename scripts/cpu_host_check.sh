#!/usr/bin/env bash
# The CPU measurements issues 38, 43 and 45 are judged on, in one command, on the host it
# runs on: each stage writes one result file named for the host (benchmarks/results/
# NAME_TAG.json, TAG = amx on an Intel AMX host, zen4 / zen3 / avx2 otherwise), a failure
# in one never stopping the rest; a summary of the files at the end. Start it in the
# background on a quiet box (nothing else running: every stage is a timing) and read
# /tmp/cpu_host_check/*.log as it goes.
#
#   scripts/cpu_host_check.sh                    # every stage, about 2 h 20 min on 2 cores
#   scripts/cpu_host_check.sh --only serve06b,quant
#   scripts/cpu_host_check.sh --list             # the stages and their commands, nothing run
#
# Stages (minutes on 2 cores, roughly): setup (0-10: the venv and vLLM's CPU build when
# missing), roofline (3), realsize (25: issue 45's real-size rows against vLLM), serve75m
# and serve06b (30 + 40: issue 38's tables with vLLM's own client), quant (15) and
# quantvllm (15: issue 43's rows), overhead (6: issue 45 item 4 on both loops, with the
# output-lane bound), chaos_bf16 (10: whether crashes change tokens of a bf16 model here).
set -uo pipefail
cd "$(dirname "$0")/.."

ONLY=""
LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY="$2"; shift ;;
    --list) LIST=1 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "cpu_host_check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

flags=$(grep -m1 '^flags' /proc/cpuinfo)
vendor=$(grep -m1 '^vendor_id' /proc/cpuinfo | awk '{print $3}')
family=$(grep -m1 '^cpu family' /proc/cpuinfo | awk '{print $4}')
if [[ "$flags" == *amx_bf16* ]]; then TAG=amx
elif [[ "$vendor" == AuthenticAMD && "$flags" == *avx512_bf16* ]]; then TAG=zen4
elif [[ "$vendor" == AuthenticAMD && "$family" == 25 ]]; then TAG=zen3
elif [[ "$flags" == *avx512f* ]]; then TAG=avx512
else TAG=avx2
fi
VLLM_VENV="${VLLM_CPU_VENV:-/work/venv-vllm-cpu}"
VPY="$VLLM_VENV/bin/python"
AL=.venv/bin/actorllm
R=benchmarks/results
LOGS=/tmp/cpu_host_check
mkdir -p "$LOGS"
# A preset's random-weight model directory (its config and the demo tokenizer), made once.
dir_of() {
  echo "\$(.venv/bin/python -c 'from actorllm.bench.presets import get_preset as g; print(g(\"$1\").model_dir())')"
}
SERVE=(--peer vllm --vllm-python "$VPY" --load-format dummy --dtype bfloat16
       --max-model-len 1024 --input-len 256 --output-len 128 --temperature 0
       --max-concurrency 1,4,16,64 --rounds 2)
REALSIZE=qwen3-0.6b-bf16-decode,qwen3-0.6b-bf16-prefill,llama-3.2-1b-bf16-decode,llama-3.2-1b-bf16-prefill
QUANT=(--layers 28 --vocab-size 151936 --batches 1,8,64 --rounds 2 --output-len 16)

stage() {  # name, then the command (a string: run through bash)
  local name="$1" cmd="$2"
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then return; fi
  if [ "$LIST" = 1 ]; then printf '%s:\n  %s\n' "$name" "$cmd"; return; fi
  echo "== $name ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
  local start=$SECONDS
  bash -c "$cmd" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "   rc $rc in $((SECONDS - start)) s; log $LOGS/$name.log"
  RESULTS+=("$name rc=$rc $((SECONDS - start))s")
}

RESULTS=()
echo "host tag: $TAG ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); family $family)"
stage setup "make install && { [ -x '$VPY' ] || VLLM_CPU_VENV='$VLLM_VENV' bash benchmarks/peers/setup_vllm_cpu.sh; }"
stage roofline "PYTHONPATH=\$PWD .venv/bin/python benchmarks/roofline.py --json $R/roofline_$TAG.json"
stage realsize "$AL bench cpu-vs-vllm --presets $REALSIZE --rounds 2 --vllm-python $VPY --roofline $R/roofline_$TAG.json --note '$TAG host, scripts/cpu_host_check.sh' --output-json $R/cpu_vs_vllm_realsize_$TAG.json"
stage serve75m "$AL bench serve --model $(dir_of qwen3-75m-bf16) ${SERVE[*]} --output-json $R/serve_vs_vllm_bf16_$TAG.json"
stage serve06b "$AL bench serve --model $(dir_of qwen3-0.6b-bf16-decode) ${SERVE[*]} --output-json $R/serve_vs_vllm_06b_bf16_$TAG.json"
stage quant "$AL bench quant ${QUANT[*]} --variants bf16,gptq4,gptq4-head,awq4,w8a8,gguf-q8_0,gguf-q4_k_m,bf16-fp8kv --output $R/quant_$TAG.json"
stage quantvllm "PYTHONPATH=\$PWD .venv/bin/python benchmarks/quant_vs_vllm.py --vocab-size 32000 --batches 1,8 --variants bf16,gptq4,awq4,w8a8 --vllm-python $VPY --output-json $R/quant_vs_vllm_$TAG.json"
stage overhead "for loop in trio asyncio; do $AL bench overhead --num-running 256,1024 --repeat 3 --lane-bound --event-loop \$loop --output-json $R/overhead_lane_bound_${TAG}_\$loop.json || exit 1; done"
stage chaos_bf16 "PYTHONPATH=\$PWD .venv/bin/python -c \"import torch; from tests.helpers.models import make_tiny_checkpoint as m; from actorllm.demo import demo_tokenizer_path as t; import shutil; p = m('/tmp/cpu_host_check/bf16', 'llama', vocab_size=4096, eos_token_id=0, max_position_embeddings=1024, hidden_size=1024, intermediate_size=2048, num_attention_heads=16, num_key_value_heads=8, head_dim=64, num_hidden_layers=2, dtype=torch.bfloat16); [shutil.copy2(f, p / f.name) for f in t().iterdir() if f.is_file()]\" && $AL bench chaos --model /tmp/cpu_host_check/bf16 --dtype bfloat16 --crashes 100 --requests-per-batch 8 --workloads 4 --backend both --actors scheduler,executor,worker,router,input_processor,output_processor --output-json $R/chaos_bf16_$TAG.json"

[ "$LIST" = 1 ] && exit 0
echo "== summary ($TAG)"
for r in "${RESULTS[@]}"; do echo "  $r"; done
ls -l $R/*_"$TAG"*.json 2>/dev/null
