#!/usr/bin/env bash
# The verl RL stage on one GPU node, end to end at the smallest size: one update of the tiny model (head_dim 64) with
# real vLLM rollouts through our depgpo_terminal loop, verl's FSDP training step and its weight sync into vLLM (the
# parts that cannot run on a CPU), then evaluation through vLLM (rollout.backend=vllm). Prepared for one call of at
# most 10 minutes; not yet run (no GPU machine lent had vLLM, verl, strace or bubblewrap: docs/vllm.md).
#   needs: a CUDA GPU; the envs/gpu-train.yaml environment (verl[vllm]==0.9.1, i.e. vLLM 0.24.0) with this package;
#          strace and bubblewrap (the sandbox)
#   run:   bash bench/gpu_verl_rl.sh [OUT_DIR]       (default /tmp/depgpo-gpu-rl; prints PASS or the failing step)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/depgpo-gpu-rl}
DEPGPO=${DEPGPO:-depgpo}
rm -rf "$OUT" && mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }

step preflight
python - <<'PY'
import importlib.metadata as m, shutil, torch
assert torch.cuda.is_available(), "no CUDA GPU"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| vllm", m.version("vllm"),
      "| verl", m.version("verl"))
missing = [tool for tool in ("strace", "bwrap") if shutil.which(tool) is None]
assert not missing, f"the sandbox needs {missing} on PATH"
PY

step "tasks, SFT data, SFT (local trainer on the GPU)"
$DEPGPO generate-tasks --out "$OUT/tasks" --pool 2 --test 0 --seed 3 --families supporting_read,required_deletion
$DEPGPO sft-data --tasks "$OUT/tasks/pool" --out "$OUT/sft/conversations.jsonl" \
  --reference "$OUT/sft/reference_credit.json" --variants 1 scale=ci
$DEPGPO sft --data "$OUT/sft/conversations.jsonl" --out "$OUT/sft" scale=ci
ls -d "$OUT"/tasks/pool/*/ > "$OUT/train.txt"

step "RL: one verl update (vLLM rollouts, FSDP step, weight sync), DepGPO"
timeout 420 $DEPGPO rl --policy "$OUT/sft/checkpoint" --train "$OUT/train.txt" --out "$OUT/rl" scale=ci \
  method=depgpo rl.backend=verl rl.updates=1 rl.tasks_per_update=2 rl.k=2 rl.checkpoint_every=1 \
  2>&1 | tee "$OUT/rl.log" | { grep -E "step|adv|reward|error|Error" || true; } | tail -40
test -f "$OUT/rl/done.json" && test -f "$OUT/rl/checkpoint/config.json"

step "evaluation of the RL policy through vLLM"
$DEPGPO evaluate --policy "$OUT/rl/checkpoint" --tasks "$OUT/tasks/pool" --run depgpo --out "$OUT/eval" scale=ci \
  rollout.backend=vllm rollout.vllm.dtype=bfloat16 rollout.vllm.enforce_eager=true  # bf16: FlashAttention's dtypes
test -f "$OUT/eval/pool.json"
step PASS
