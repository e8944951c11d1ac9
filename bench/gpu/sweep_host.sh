# Sourced by the bench/gpu sweep scripts, on the GPU host from the repo root, with out, budget, start, dir and name
# set: installs the carried wheels (or reuses a warm host's), builds DeepSpeed's ops once, opens $log, keeps copies
# of the results in $out as rows arrive, and defines left (seconds of the budget left) and sweep (dsx sweep within it).
if [ -d /tmp/site/deepspeed ]; then  # a warm host from the previous command: reinstalling would touch the
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/torch_extensions
  export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}  # sources and rebuild the ops
else
  source .whl/prelude.sh .whl
fi
export PYTHONPATH=$PWD:$PYTHONPATH
mkdir -p "$dir"
log=$out/${name}_$(date -u +%Y%m%dT%H%M%SZ).log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)" >"$log"
python3 -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__)" >>"$log" 2>&1

# DeepSpeed JIT-builds FusedAdam (no offload) and CPUAdam (offload) on first use, ~50-70 s each: build both at
# once before the sweeps (TORCH_CUDA_ARCH_LIST as dsx gives the ranks; the host's 9.0a breaks the builder).
for op in FusedAdamBuilder CPUAdamBuilder; do
  TORCH_CUDA_ARCH_LIST=9.0 python3 -c "from deepspeed.ops.op_builder import $op; $op().load()" >>"$log" 2>&1 &
done
wait
echo "ops built after $(( $(date +%s) - start )) s" >>"$log"

# keep copies in $OUT as rows arrive: if the command is cut short, what was measured still comes back
( while sleep 15; do cp "$dir"/*.jsonl "$out"/ 2>/dev/null; cp "$log" "$out"/ 2>/dev/null; done ) &
left() { echo $(( budget - ($(date +%s) - start) )); }
sweep() { echo "+ dsx sweep $*" >>"$log"; timeout -s INT "$(left)" python3 -m dsx sweep "$@" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
