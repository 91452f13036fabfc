#!/usr/bin/env bash
# phasewise's CUDA paths on one GPU, in one short run: the microbenchmarks (bf16 and fp8
# GEMM ceilings, copy and read bandwidth); `phasewise calibrate` with its GPU defaults (the
# largest default model that fits, prompts of 2048 and 4096 tokens, graphed decode of 1 and
# 8 sequences); then prefill and decode of the reference transformer timed with CUDA events
# (decode replayed as a CUDA graph, and once without, to show the launch overhead the graph
# removes) for dense GQA, sliding-window and MLA + MoE models, each point beside what that
# calibration expects for it.
#
#   bash benchmarks/bench_cuda.sh OUT_DIR
#
# Needs python3 with a CUDA build of torch and phasewise importable (`pip install -e .`, or
# PYTHONPATH=src with its dependencies). Every step writes OUT_DIR/<step>.txt and .err and
# keeps going when one fails; the profile documents are OUT_DIR/<model>.json. The points
# can be changed through the variables below (a CPU dry run: DEVICE=cpu with small ones,
# CALIBRATE_ARGS="--isl 32 --context 16 --repeats 1").
set -uo pipefail
out=${1:?usage: bash benchmarks/bench_cuda.sh OUT_DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
read -r -a PW <<< "${PW:-python3 -m phasewise}"
DEVICE=${DEVICE:-cuda}
REPEATS=${REPEATS:-10}
ISL=${ISL:-128,512,2048,4096}        # prompt lengths
BATCH=${BATCH:-1,8,32,128}           # decode sequences per step, dense models
BATCH_OTHER=${BATCH_OTHER:-1,8,32}   # the others (larger KV per token, or no graph)
CTX=${CTX:-1024}                     # cached tokens per decode sequence
DENSE=${DENSE-"llama-3.2-1b llama-3.1-8b"}
OTHER=${OTHER-"gemma-2-9b deepseek-v2-lite"}   # sliding-window hybrid; MLA with MoE
NOGRAPH=${NOGRAPH-llama-3.1-8b}     # decode again without the CUDA graph

step() {  # step NAME COMMAND...: run it, keep its output, report its status and seconds
    local name=$1 start=$SECONDS rc
    shift
    echo "== $name: $*"
    "$@" > "$out/$name.txt" 2> "$out/$name.err"
    rc=$?
    echo "   rc=$rc in $((SECONDS - start)) s"
    tail -n 30 "$out/$name.txt"
    [ "$rc" -eq 0 ] || tail -n 8 "$out/$name.err"
}

if command -v nvidia-smi > /dev/null; then
    step nvidia-smi nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
fi
step micro "${PW[@]}" profile --micro --device "$DEVICE" --repeats "$REPEATS" --format json --out "$out/micro.json"
step calibrate "${PW[@]}" calibrate --device "$DEVICE" ${CALIBRATE_ARGS:-} --out-dir "$out/calibration"
expected=()
[ -f "$out/calibration/calibration.toml" ] && expected=(--calibration "$out/calibration/calibration.toml")
for model in $DENSE; do
    step "$model" "${PW[@]}" profile --model "$model" --device "$DEVICE" --isl "$ISL" -b "$BATCH" \
        --context "$CTX" --repeats "$REPEATS" --ceilings "$out/micro.json" "${expected[@]}" \
        --out "$out/$model.json" --plot "$out/$model"
done
for model in $OTHER; do
    step "$model" "${PW[@]}" profile --model "$model" --device "$DEVICE" --isl "$ISL" \
        -b "$BATCH_OTHER" --context "$CTX" --repeats "$REPEATS" --ceilings "$out/micro.json" \
        "${expected[@]}" --out "$out/$model.json"
done
for model in $NOGRAPH; do
    step "$model-nograph" "${PW[@]}" profile --model "$model" --device "$DEVICE" --isl 128 \
        -b "$BATCH" --context "$CTX" --repeats "$REPEATS" --no-cuda-graphs \
        --ceilings "$out/micro.json" "${expected[@]}" --out "$out/$model-nograph.json"
done
