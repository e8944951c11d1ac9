# The GPU host prelude of every bench/ script (bench/gpu/README.md). On the offline GPU host, from the repo root:
#     source bench/gpu/prelude.sh .whl
# .whl is the wheelhouse bench/gpu/wheelhouse.sh built here, carried to the host with the command.
#
# It installs the wheelhouse into /tmp/site (skipped on a warm host that already holds these very wheels:
# reinstalling would touch DeepSpeed's sources and rebuild its JIT ops), puts this checkout first on PYTHONPATH
# (the dsx under test is the working tree, not the wheel), sets the environment every run there needs, and
# defines the helpers the scripts share. PRELUDE_NO_INSTALL=1 skips the wheelhouse (a machine whose python3 already
# has DeepSpeed: a dry run of a script here). The helpers write to the log file $log:
#   start_log FILE           open $log at FILE: a '## UTC time GPUs' line, then torch/transformers/DeepSpeed versions
#   run SECONDS COMMAND...   '+ COMMAND', COMMAND under `timeout` (signal $RUN_SIGNAL, TERM unless set), 'exit N';
#                            returns COMMAND's status
#   set_deadline SECONDS     the script must be done SECONDS from now (a device command: 600 s, less a margin)
#   time_left                prints the seconds left before it
#   run_by CAP COMMAND...    run, its limit CAP or the time left less 10 s, whichever is smaller; with less than
#                            MIN_RUN_S (default 30) s left it logs '+ COMMAND', 'skipped: N s left', 'exit 124'
#                            and returns 124 without starting COMMAND
#   build_ops OP...          JIT-build DeepSpeed ops (FusedAdamBuilder, CPUAdamBuilder, QuantizerBuilder) at once,
#                            ~50-70 s each, each within BUILD_S s (default 900); logs 'ops: OP built in N s' or
#                            'ops: OP FAILED ...'; returns non-zero if one failed
#   copy_out [--flat] DEST PATTERN...  copy the files matching each PATTERN (repo-relative) under DEST, keeping their
#                            paths (--flat: by their names only, straight into DEST)
#   keep_copies [--flat] DEST PATTERN...  copy_out every 15 s in a background loop, so what was measured comes back
#                            even when the command is cut short. The loop's output goes to /dev/null (it never holds
#                            the command's stdout open: a piped device command returns when the script ends), it
#                            ends by itself when the script's shell is gone, and keep_copies installs
#                            `trap stop_copies EXIT`: the loop is stopped and one last copy made when the script
#                            exits (a script with its own EXIT trap must call stop_copies in it). A second
#                            keep_copies stops the first loop (with its last copy) before it starts its own.
#   stop_copies              stop the loop now and make its last copy_out (nothing when no loop runs)
#   show_log                 the log's command, exit and figure lines (what a device command prints at its end)
# and the dsx flag sets the scripts share:
#   adam                     torch's fused AdamW in place of DeepSpeed's FusedAdam (no JIT build)
#   lean                     bench/mfu's tuned semantics for GPT-2 shapes, less compile: vocabulary 50304, sequence
#                            1024, TF32, dropout 0, adam, no clipping, no bf16 overflow check
#   nccl_socket              NCCL variables (for `env`) that make the ranks of one host talk over TCP sockets on the
#                            loopback interface instead of NVLink or shared memory: a slow link, as between nodes
_wh=${1:-.whl}
_wheels=$(cd "$_wh" 2>/dev/null && ls -1 -- *.whl 2>/dev/null | sort)
if [ -n "${PRELUDE_NO_INSTALL:-}" ]; then
  :
elif [ -z "$_wheels" ]; then
  echo "bench/gpu/prelude.sh: no wheels in '$_wh' (build them here with bench/gpu/wheelhouse.sh $_wh, carry $_wh)" >&2
  unset _wh _wheels
  return 1
elif [ "$_wheels" != "$(cat /tmp/site/.wheelhouse 2>/dev/null)" ]; then
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

adam=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
nccl_socket=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo)
lean=(--vocab-pad 64 --seq-len 1024 --tf32 --set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0 "${adam[@]}"
      --ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false)

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

set_deadline() {
  _deadline=$(( $(date +%s) + $1 ))
}

time_left() {
  echo $(( ${_deadline:-$(( $(date +%s) + 86400 ))} - $(date +%s) ))
}

run_by() {
  local cap=$1 left
  shift
  left=$(( $(time_left) - 10 ))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt "${MIN_RUN_S:-30}" ]; then
    { echo "+ $*"; echo "skipped: $(time_left) s left before the deadline"; echo "exit 124"; } >>"$log"
    return 124
  fi
  run "$cap" "$@"
}

build_ops() {
  # TORCH_CUDA_ARCH_LIST as dsx gives the ranks: the hosts set 9.0a, which DeepSpeed 0.19's op builder cannot parse
  local op i rc=0 t0=$(date +%s) pids=()
  for op in "$@"; do
    TORCH_CUDA_ARCH_LIST=9.0 timeout "${BUILD_S:-900}" python3 -c \
      "from deepspeed.ops.op_builder import $op; $op().load()" >>"$log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      echo "ops: ${*:i+1:1} built in $(( $(date +%s) - t0 )) s" >>"$log"
    else
      echo "ops: ${*:i+1:1} FAILED (exit $?) after $(( $(date +%s) - t0 )) s" >>"$log"
      rc=1
    fi
  done
  return $rc
}

copy_out() {
  local flat= dest pattern
  [ "${1:-}" = --flat ] && { flat=1; shift; }
  dest=$1
  shift
  mkdir -p "$dest"
  for pattern in "$@"; do
    # shellcheck disable=SC2086  # the pattern is expanded here, when the files exist
    if [ -n "$flat" ]; then
      cp $pattern "$dest"/ 2>/dev/null
    else
      cp --parents $pattern "$dest"/ 2>/dev/null
    fi
  done
  return 0
}

keep_copies() {
  stop_copies
  _copies_args=("$@")
  (
    trap 'kill "${_nap:-}" 2>/dev/null; exit 0' TERM INT
    while kill -0 "$$" 2>/dev/null; do  # $$: the script's shell; the loop ends with it
      sleep 15 &
      _nap=$!
      wait "$_nap"
      copy_out "${_copies_args[@]}"
    done
  ) </dev/null >/dev/null 2>&1 &
  _copies_pid=$!
  trap stop_copies EXIT
}

stop_copies() {
  if [ -n "${_copies_pid:-}" ]; then
    kill "$_copies_pid" 2>/dev/null
    wait "$_copies_pid" 2>/dev/null
    _copies_pid=
    copy_out "${_copies_args[@]}"
  fi
  return 0
}

show_log() {
  local lines='^\+|^exit|^##|^torch|^ops|^\[|^sweep|^scaling|^OK|^ERROR|^dsx run:|^skipped'
  grep -E "$lines|fits up|seconds|step time|tokens/s|MFU|memory max" "$log" | tail -n 60
}
