# The GPU host prelude of every bench/ script (bench/gpu/README.md). On the offline GPU host, from the repo root:
#     source bench/gpu/prelude.sh .whl
# .whl is the wheelhouse bench/gpu/wheelhouse.sh built here, carried to the host with the command.
#
# It installs the wheelhouse into /tmp/site (skipped on a warm host that already holds these very wheels:
# reinstalling would touch DeepSpeed's sources and rebuild its JIT ops), puts this checkout first on PYTHONPATH
# (the dsx under test is the working tree, not the wheel), sets the environment every run there needs, and
# defines the helpers the scripts share. The helpers write to the log file $log:
#   start_log FILE           open $log at FILE: a '## UTC time GPUs' line, then torch/transformers/DeepSpeed versions
#   run SECONDS COMMAND...   '+ COMMAND', COMMAND under `timeout` (signal $RUN_SIGNAL, TERM unless set), 'exit N';
#                            returns COMMAND's status
#   build_ops OP...          JIT-build DeepSpeed ops (FusedAdamBuilder, CPUAdamBuilder) at once, ~50-70 s each
#   copy_out DEST PATTERN... copy the files matching each PATTERN (repo-relative) under DEST, keeping their paths
#   keep_copies DEST PATTERN...  copy_out every 15 s in the background: what was measured comes back even when the
#                            command is cut short
#   show_log                 the log's command, exit and figure lines (what a device command prints at its end)
_wh=${1:-.whl}
_wheels=$(cd "$_wh" 2>/dev/null && ls -1 -- *.whl 2>/dev/null | sort)
if [ -z "$_wheels" ]; then
  echo "bench/gpu/prelude.sh: no wheels in '$_wh' (build them here with bench/gpu/wheelhouse.sh $_wh, carry $_wh)" >&2
  unset _wh _wheels
  return 1
fi
if [ "$_wheels" != "$(cat /tmp/site/.wheelhouse 2>/dev/null)" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$_wh"/*.whl || return 1
  printf '%s\n' "$_wheels" >/tmp/site/.wheelhouse
fi
unset _wh _wheels
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
# NVLink multicast must stay off on the shared multi-GPU hosts
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# one JIT cache for all runs of this machine (DeepSpeed ops build once)
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions}

start_log() {
  log=$1
  mkdir -p "$(dirname "$log")"
  {
    echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader)"
    python3 -c "import torch, transformers, deepspeed as ds
print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', ds.__version__)"
  } >"$log" 2>&1
}

run() {
  local limit=$1 rc
  shift
  echo "+ $*" >>"$log"
  timeout -s "${RUN_SIGNAL:-TERM}" "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "exit $rc" >>"$log"
  return $rc
}

build_ops() {
  # TORCH_CUDA_ARCH_LIST as dsx gives the ranks: the hosts set 9.0a, which DeepSpeed 0.19's op builder cannot parse
  local op pids=()
  for op in "$@"; do
    TORCH_CUDA_ARCH_LIST=9.0 python3 -c "from deepspeed.ops.op_builder import $op; $op().load()" >>"$log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
}

copy_out() {
  local dest=$1 pattern
  shift
  mkdir -p "$dest"
  for pattern in "$@"; do
    # shellcheck disable=SC2086  # the pattern is expanded here, when the files exist
    cp --parents $pattern "$dest"/ 2>/dev/null
  done
  return 0
}

keep_copies() {
  ( while sleep 15; do copy_out "$@"; done ) &
}

show_log() {
  local lines='^\+|^exit|^##|^torch|^ops|^\[|^sweep|^scaling|^OK|^ERROR|^dsx run:'
  grep -E "$lines|fits up|seconds|step time|tokens/s|MFU|memory max" "$log" | tail -n 60
}
