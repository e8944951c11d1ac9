#!/usr/bin/env bash
# Multi-GPU evidence (issue 30): data-parallel scaling 1 -> 2 -> 4 GPUs, two "nodes" through a hostfile, pipeline
# stages against data parallel, the 1-bit optimizers and ZeRO++, `dsx sweep --gpus 4` choosing between ZeRO stages
# and pipeline stages, and the largest model a 4-GPU host trains. Replaces bench/scaling/h200x2.sh,
# bench/pipeline/h200x2.sh and bench/onebit/h200x2.sh. From the repo root on the GPU host, one part per device
# command (bench/multigpu/README.md has the order):
#     bash bench/multigpu/run.sh $OUT PART...
# carry [".whl"] (onebit2: [".whl", ".whl18"]); kind nvidia-h100-x2 for the x2 parts, nvidia-h100-x4 for the x4
# ones (an H200 host of that size does as well: every row names its GPU). E.g.
#     bash bench/multigpu/run.sh $OUT dp2-z1          carry [".whl"], kind nvidia-h100-x2
#     bash bench/multigpu/run.sh $OUT dp4             carry [".whl"], kind nvidia-h100-x4
#     bash bench/multigpu/run.sh $OUT onebit2         carry [".whl", ".whl18"], kind nvidia-h100-x2
#
# A part writes its rows to bench/multigpu/rows/PART.jsonl (dsx's run folders beside it, git-ignored) and its log
# to $OUT/PART.log; keep_copies puts PART.jsonl into $OUT too (flat: two files per part, largest4 three), every 15 s
# and once more when the script exits, so what was measured comes back when the command is cut short. After each
# command copy $OUT/PART.jsonl to bench/multigpu/rows/ and $OUT/PART.log to bench/multigpu/logs/: a sweep part
# (pipe*, sweep4, largest4) run again then resumes from its rows, skipping the trials that have one; a `dsx run`
# part run again appends new rows (summary.py compares each multi-GPU row with the 1-GPU row nearest in time).
#
# Time: the parts of a command share BUDGET_S seconds (default 570) from the script's start. Every run is capped at
# the time left (prelude.sh's run_by); a `dsx run` gets its own --timeout 60 s inside that cap (a run cut by time
# leaves a `timeout` row); sweeps have --trial-timeout (a trial cut by the deadline leaves no row and runs again on
# the next command); a run that does not fit what is left is skipped ('skipped' in the log); a failed run does not
# stop the part. RUN_SIGNAL=INT: dsx run / dsx sweep stop their ranks and exit.
# BEST_ZERO (default 1) is the stage of the default-settings, two-node and 4-GPU parts: ZeRO-1 is what the sweep
# picks for gpt2-xl on one H100 (bench/largest/README.md) and moves the fewest bytes at 8 micro-batches per step
# (`dsx estimate`, 2 GPUs: 8.7 GiB per step against ZeRO-2's 49.3: ZeRO-1 reduces once per step, ZeRO-2 after every
# micro-batch); set it to the stage dp2-z1/z2/z3 measured best. DRY=1 prints every dsx command's plan (--dry-run)
# on a machine without GPUs, to check the flags (PRELUDE_NO_INSTALL: this machine's dsx and DeepSpeed).
#
# The parts. Times are ESTIMATES, not measured, from the committed H100 rows (bench/mfu, bench/largest): a gpt2-xl
# run takes ~55 s to start (prepare, launch, imports, model build, deepspeed.initialize); inductor compiles it in
# ~90-150 s cold, ~30 s from the cache a run on the same GPU index left (the cache is per GPU index, so the runs
# with the most GPUs go first); an eager gpt2-xl run ~80 s; a gpt2 124M run ~45 s; a command ~30 s of prelude.
#   TUNED = bench/mfu's 45.7% MFU command (h100_masks/): gpt2-xl, --vocab-pad 64 --tf32 --compile, dropout 0,
#   torch's fused AdamW, no clipping, no bf16 overflow check, micro-batch 16 x grad-accum 8; 6 timed steps after 2.
#   x2 parts (2 GPUs):
#   dp2-z1      ~5.5-6.5 min  TUNED at ZeRO-1: 2 GPUs, then 1 GPU
#   nodes2      ~4-5.5 min    TUNED at ZeRO-$BEST_ZERO over two 1-GPU "nodes" of the host (rows/hosts-2x1,
#                             --launcher no-ssh, --include 127.0.0.1:0@127.0.0.2:1), then its 1-GPU row
#   dp2-z2      ~5.5-7.5 min  TUNED at ZeRO-2: 2 GPUs, 1 GPU, then 2 GPUs with --no-comm-log (the logger synchronises
#                             after every collective, and ZeRO-2 reduces after every micro-batch)
#   dp2-z3      ~4 min        ZeRO-3 as a sweep runs it: TUNED without --compile (the sweep prunes compile at ZeRO-3
#                             as the same as eager), micro-batch 8 x 2, --no-comm-log; 5 timed steps after 2: 2 GPUs,
#                             1 GPU (first try, 2026-11-27, 2 x H200: micro-batch 8 x 8 with the comms logger took
#                             ~54 s a step at ZeRO-3 and was cut at 180 s after its warm-up: rows/dp2-z3.jsonl)
#   dp2-llama   ~3 min        dp4-llama's llama-3b on 2 GPUs, then 1 (a ZeRO-3 pair of a second model on one 2-GPU host,
#                             as dp2-z3's gpt2-xl pairs: dsx.calibration.ZERO3_FETCH_PAIRS)
#   dp2-default ~6 min        dsx's defaults at ZeRO-$BEST_ZERO, micro-batch 8 (DeepSpeed's FusedAdam, built first,
#                             ~50 s; GPT-2's dropout, clipping 1.0, the overflow check; no compile, no vocabulary
#                             padding; 10 timed steps after 3): 2 GPUs, 1 GPU, two nodes
#   pipe2       ~5.5 min      PIPE, 2 stages x 1, m = 1, 4, 16
#   pipe2-dp    ~5.5 min      PIPE's model and micro-batch as ZeRO-1 data parallel over the 2 GPUs, m = 1, 4, 16
#   onebit2     ~6 min        bench/onebit/h200x2.sh's first half: the DeepSpeed 0.18.9 lane (bench/onebit/lane18.sh)
#                             on GPT-2 124M (vocab 50304, seq 1024, micro-batch 8, 20 timed steps after 5), fp16
#                             without ZeRO: torch's Adam, then 1-bit Adam, 0/1 Adam and 1-bit LAMB (freeze step
#                             half-way through the timed steps: comm.phases has both phases' bytes and step time);
#                             then DeepSpeed 0.19.8 ZeRO-2 with and without the comms logger (its cost on NCCL)
#   logger2     ~2 min        onebit2's last two runs alone (no 0.18.9 lane): ZeRO-2 with and without the comms logger
#   comm2       ~5.5 min      GPT-2 124M (as logger2) at ZeRO-1, 2 and 3, each with and without the comms logger, then
#                             ZeRO-3 without it on 1 GPU: the logger's cost per stage, ZeRO-3's across GPUs alone
#   logger-z3   ~3.5 min      dp2-z3's gpt2-xl on 2 GPUs with the comms logger, then without: the logger's price per
#                             ZeRO-3 fetch judged on a model it did not come from
#   logger-warm ~6 min        logger-z3's gpt2-xl on 2 GPUs with dsx's default since 2026-11-29 (the logger counts the
#                             second warm-up step, off in the timed steps), without the logger, with it in the timed
#                             steps (--warmup 1: as every default run before), then the default again
#   host2       ~7 min        rows that carry their host's Python speed (dsx.host, since 2026-11-29) for the estimate's
#                             host terms: host_probe.py, then GPT-2 124M as comm2 runs it at ZeRO-1 and ZeRO-3 on 2
#                             GPUs and on 1, then logger-warm's gpt2-xl ZeRO-3 (dsx's default) on 2 GPUs and on 1,
#                             then the probe again
#   zeropp2     ~5.5-6.5 min  its second half: ZeRO-3, then DeepSpeed's quantizer op built on its own (within 240 s;
#                             h200x2.sh had 12 runs of ~40 s and this build in one command, more than 10 minutes:
#                             its ZeRO++ runs, last, did not finish), then qwZ (int8 weights), hpZ (a secondary
#                             partition of 2), and qwZ + qgZ + hpZ (qgZ on one node: DeepSpeed reduce-scatters as
#                             without it); skipped when the op does not build
#   autocast2   ~7 min        --precision bf16-autocast against bf16 on 2 GPUs, alternating pairs (the comms logger
#                             counts warm-up step 2): GPT-2 124M as comm2 runs it at ZeRO-2 (transformers' Conv1D: its
#                             gradients go in fp32 under autocast), then llama-1b (seq 2048, every matrix a
#                             torch.nn.Linear: bf16) at ZeRO-2 and ZeRO-3, micro-batch 4 x 2: bytes against
#                             dsx.comm.predict's autocast row, tokens/s against bf16's
#   conv1d2    ~5 min         GPT-2 124M as autocast2 runs it: bf16, then bf16-autocast with DeepSpeed's default
#                             lower_precision_safe_modules and with transformers' Conv1D added to them (the advice of
#                             dsx.comm.predict's note: its gradients in bf16), alternating twice
#   replay2    ~4 min         out of sample for dsx.comm.zero3 (ZeRO-3's gathers replayed, which the committed rows were
#                             matched on at DeepSpeed's defaults): llama-1b as autocast2 runs it at ZeRO-3 with
#                             stage3_prefetch_bucket_size 0 (predicted beforehand 7,518 MiB of gathers a step, the
#                             old formula 9,190), with stage3_max_reuse_distance 0 and a prefetch bucket of 2e8
#                             (8,648; formula 6,948), and at the defaults with checkpointing (the replay leaves the
#                             recompute out: 5,642; formula 6,949)
#   replay3    ~6 min         out of sample for the replay of every hook's fetch (dsx.comm.zero3 after replay2), the
#                             predictions (all-gathers a step) written here beforehand: gpt2-xl as logger-warm runs it
#                             with stage3_max_reuse_distance 0 and a prefetch bucket of 2e8 (8,699.2 MiB), llama-1b
#                             with stage3_max_live_parameters and stage3_max_reuse_distance 3e8 under --act-ckpt
#                             (10,366.1), gpt2-xl under --act-ckpt (8,748.0), llama-1b at those 3e8 without (10,302.1)
#   x4 parts (4 GPUs):
#   dp4         ~6.5-8 min    TUNED at ZeRO-$BEST_ZERO: 4 GPUs, 1 GPU, then 2 GPUs (1 -> 2 -> 4 in one command; the
#                             2-GPU run last: it is the one skipped if time runs short)
#   nodes4      ~5.5-6 min    TUNED at ZeRO-$BEST_ZERO over two 2-GPU "nodes" (rows/hosts-2x2, --include
#                             127.0.0.1:0,1@127.0.0.2:2,3), then its 1-GPU row
#   dp4-llama   ~6 min        llama-3b (seq 2048) at ZeRO-3 with checkpointing, micro-batch 4 x 4, torch's fused
#                             AdamW, 3 timed steps after 1, --no-comm-log: 4, 2, 1 GPUs (first try, 2026-11-27, 5
#                             after 2 with the comms logger: the 4- and 2-GPU runs passed warm-up and were cut at 140 s
#                             before their timed steps ended; the logger synchronises after each of ZeRO-3's
#                             collectives, thousands a step). Micro-batch 4 is what fits one GPU:
#                             `dsx estimate --model llama-3b --zero 3 --gpus 1 --micro-batch 4 --act-ckpt --gpu-kind
#                             h100-80gb` needs 67.1 of 79.2 GiB (largest 7; 8 needs 80.4); 2 GPUs 43.2, 4 GPUs 31.2
#   pipe4       ~4.5 min      PIPE, 4 stages x 1, m = 4, 16
#   pipe2x2     ~4.5 min      PIPE, 2 stages x 2 replicas, m = 4, 16
#   pipe4-dp    ~4.5 min      PIPE's model and micro-batch as ZeRO-1 data parallel over the 4 GPUs, m = 4, 16
#   sweep4      ~7-7.5 min    `dsx sweep --gpus 4` on gpt2-xl over --zero 1,2,3 x --pipeline-stages none,2,4 at 16
#                             micro-batches per step, micro-batch auto up to 8, 3 timed steps after 1: its estimate
#                             keeps ZeRO-1, ZeRO-2, 2 stages x 2 and 4 stages (--keep-within 0.25; ZeRO-3 is
#                             predicted 45% slower; pipelines with ZeRO-2/3 are refused), 4 trials, and it reports
#                             the fastest measured; its plan (--dry-run) first, in the log
#   largest4    ~6-9 min      `dsx estimate --model llama-8b --largest --gpus 4 --json` on the host (the visible
#                             GPU's kind, its RAM from free -b), then that model as proposed: a one-configuration sweep
#                             (bench/largest/axes.py) at the proposed micro-batch, 2 timed steps after 1. Here, on the
#                             CPU machine, with the x4 host's RAM given and LARGEST_CAP=70GiB:
#        dsx estimate --model llama-8b --largest --gpu-kind h100-80gb --gpus 4 --host-memory 500GiB --memory-cap 70GiB
#        -> 30.2B parameters: 59 layers, hidden 6144, 48 heads / 8 KV heads, FFN 21504, untied; z3 off=cpu:0.7 bf16
#           ckpt 4gpu ga1, micro-batch 4; predicted 64.2 GiB allocated per GPU, host 107.14 GiB per rank (binds),
#           1,752 tokens/s, 81 model TFLOP/s per GPU, 18.7 s per step. Without the cap (first try, 2026-11-27):
#           34B, 67 layers, ratio 0.6, micro-batch 2 x ga 2, 72.8 GiB per GPU: its warm-up step ran at the memory
#           limit. On 4 x H200 (503 GiB) with LARGEST_CAP=120GiB LARGEST_MIN_TFLOPS=100:
#        dsx estimate --model llama-8b --largest --gpus 4 --gpu-kind h200-141gb --host-memory 503GiB
#          --memory-cap 120GiB --min-tflops 100
#        -> 34B (67 layers, hidden 6144, 48 / 8 heads, FFN 21504), z3 off=cpu:0.6 bf16 ckpt 4gpu ga1, micro-batch 11;
#           predicted 114.2 GiB allocated per GPU, host 106.11 GiB per rank, 2,895 tokens/s, 152 TFLOP/s per GPU.
#        Measured (2026-11-27, 4 x H100, 503 GiB, LARGEST_MIN_TFLOPS=100 and PYTORCH_CUDA_ALLOC_CONF=
#        expandable_segments:True, no cap): 30.2B, ratio 0.7, micro-batch 6 x ga 1, 137.7 model TFLOP/s per GPU
#        (predicted 106), 73.4 GiB allocated (73.0), a 7.5-minute command (bench/multigpu/measured.md).
#                             Before the run: the CPU-Adam op build (PIN_PROBE=1: a pinned-memory probe, how fast the
#                             host page-locks memory, as deepspeed.initialize does for the offloaded optimizer state);
#                             after it, DeepSpeed's log lines of the initialisation with their times ('ds-init:'),
#                             the row's overhead and memory. -> $OUT/largest4.json (the answer), .jsonl, .log
#   largest4-omp  ~6-9 min    the same with OMP_NUM_THREADS = cores / 4 and OMP_WAIT_POLICY=PASSIVE for the ranks
#                             (rows of its own): for GPU ranks neither dsx nor DeepSpeed's launcher shares the cores
#                             out, so the 4 ranks' CPU Adam (OpenMP) each start one thread per core; run it if
#                             largest4 misses 100 TFLOP/s per GPU and its log shows a slow optimizer step
#   long4       ~9.5 min      Ulysses sequence parallelism over the 4 GPUs (issue 32's 4-GPU target, llama-8b >= 512k):
#                             llama-8b at 524,288 tokens, ZeRO-3, --sequence-parallel 4 (131,072 tokens a rank), the
#                             tiled loss, checkpointing with the layers' inputs in pinned host memory and DeepSpeed's
#                             TiledMLP, expandable segments, --no-comm-log; ONE step and no warm-up (dsx estimate: 233 s
#                             a step, 56.9 of 79.2 GiB per GPU, 36 GiB of host memory per rank; two steps and the
#                             start do not fit one 10-minute command), then sp4-1b if time is left (measured
#                             2026-11-28 on 4 x H100: a 270 s step, the whole command with sp4-1b 531 s)
#   sp4-1b      ~3 min        tokens/s at a fixed length, 4 GPUs against 1: llama-1b at 65,536 tokens (ZeRO-2, tiled
#                             loss, checkpointing, 3 timed steps after 1) with --sequence-parallel 4 on 4 GPUs (the
#                             comms logger on: the all-to-alls' bytes beside dsx's prediction), then on 1 GPU
#   sparse-sp4  ~6 min        sparse attention under Ulysses (issue 32 item 4): llama-1b at 131,072 tokens (ZeRO-2, the
#                             tiled loss, checkpointing, 3 timed steps after 1), --sequence-parallel 4 with dense SDPA,
#                             then with DeepSpeed's bigbird layout in 128-token blocks (FlexAttention; each rank its 8
#                             heads' layout over the whole sequence), then bigbird on 1 GPU: the same global batch, so
#                             its loss curve is the 4-GPU one's (learnable data)
#   z3-1b-ckpt  ~4 min        a third model shape at ZeRO-3 over 4, 2, 1 GPUs for the estimator's ZeRO-3 fetch cost
#   z3-1b       ~4 min        (gpt2-xl and llama-3b disagree, bench/multigpu/measured.md): llama-1b (seq 2048) as
#                             dp4-llama runs llama-3b (micro-batch 4 x 4, torch's fused AdamW, 3 timed steps after 1,
#                             --no-comm-log), with checkpointing (z3-1b-ckpt) and without (z3-1b)
#   omp4        ~7 min        the ranks' OpenMP threads (dsx now gives each of a host's GPU ranks its share of the cores,
#                             OMP_NUM_THREADS = cores / ranks, where it was unset: one thread per core in every rank):
#                             sparse-sp4's bigbird run and z3-1b's 4-GPU run with dsx's default and with
#                             OMP_NUM_THREADS=$(nproc) (the old behaviour), alternating
#   omp4-z3     ~4 min        z3-1b's 4-GPU run alone: OMP_NUM_THREADS=$(nproc), dsx's default, $(nproc) again
#   pipe4-omp   ~8 min        the H100 pipe4 and pipe4-dp rows ran with one OpenMP thread per core in every rank (before
#                             dsx shared the cores out); their ranks make each micro-batch in the timed step. PIPE at
#                             m = 16 as `dsx run`: 4 stages, then data parallel over 4, each with dsx's default and with
#                             OMP_NUM_THREADS=$(nproc), alternating; then 4 stages at m = 4 with dsx's default
#   z3-4v1      ~6 min        the estimate's 4-GPU / 1-GPU ratio at ZeRO-3, predicted before the run (2026-11-30, h200-141gb,
#                             a host of 37.4 ns): gpt2-xl as dp2-z3 runs it 57,430 / 16,115 tokens/s (3.56x), llama-1b
#                             as z3-1b-ckpt runs it 89,285 / 24,911 (3.58x): each on 4 GPUs, then 1
#   ratio2      ~5 min        the 2-GPU / 1-GPU ratio out of sample, predicted before the run (2026-11-30, h200-141gb, a
#                             host of 37.4 ns): llama-3b (seq 2048), micro-batch 2 x 4, torch's fused AdamW, eager, 3
#                             timed steps after 1, no comms logger; ZeRO-2: 39,131 / 18,833 tokens/s (2.08x: the
#                             optimizer step halves), ZeRO-3: 17,785 / 11,596 (1.53x); each on 2 GPUs, then 1
#   PIPE = gpt2-xl (vocab 50304, seq 1024), ZeRO-1, bf16, micro-batch 4, torch's fused AdamW, 5 timed steps after 2,
#   one `dsx sweep --no-prune` over m, the micro-batches per optimizer step (--grad-accum; PIPE_M=4,16 sets them for
#   every pipe* part: e.g. `PIPE_M=4,16 bash bench/multigpu/run.sh $OUT pipe2 pipe2-dp`, both in one command on one
#   host, ~7 minutes); ~95 s a trial; the 1F1B
#   bubble is (p-1)/(m+p-1), and summary.py measures it.
# Every part ends with `dsx report --vs-estimate --format markdown` and summary.py on its rows, in its log.
set -uo pipefail
usage="usage: bench/multigpu/run.sh OUT PART... (parts: dp2-z1 nodes2 dp2-z2 dp2-z3 dp2-llama dp2-default pipe2
  pipe2-dp onebit2 logger2 comm2 logger-z3 logger-warm host2 autocast2 conv1d2 replay2 replay3 zeropp2 dp4 nodes4 dp4-llama pipe4 pipe2x2 pipe4-dp pipe4-omp z3-4v1 ratio2 sweep4 largest4
  largest4-omp long4 sp4-1b sparse-sp4 z3-1b z3-1b-ckpt omp4 omp4-z3)"
out=${1:?$usage}
shift
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
script_start=$(date +%s)
[ -n "${DRY:-}" ] && export PRELUDE_NO_INSTALL=1
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
set_deadline $(( ${BUDGET_S:-570} - ($(date +%s) - script_start) ))
export RUN_SIGNAL=INT  # dsx run / dsx sweep stop their ranks' process group and exit; a sweep's rows so far stay
rows=bench/multigpu/rows
[ -n "${DRY:-}" ] && rows=$out/rows  # a dry run writes no committed file
mkdir -p "$rows" "$out"
dry=()
[ -n "${DRY:-}" ] && dry=(--dry-run)
best=${BEST_ZERO:-1}

tuned=(--model gpt2-xl "${lean[@]}" --compile --micro-batch 16 --grad-accum 8 --steps 6 --warmup 2)
tuned_z3=(--model gpt2-xl "${lean[@]}" --micro-batch 8 --grad-accum 2 --zero 3 --steps 5 --warmup 2 --no-comm-log)
default=(--model gpt2-xl --micro-batch 8 --steps 10 --warmup 3)
llama=(--model llama-3b --zero 3 --act-ckpt --micro-batch 4 --grad-accum 4 "${adam[@]}" --steps 3 --warmup 1
       --no-comm-log)
long1b=(--model llama-1b --zero 2 --precision bf16 --micro-batch 1 --act-ckpt --loss tiled "${adam[@]}"
        --seq-len 65536 --set max_position_embeddings=65536 --steps 3 --warmup 1)
long8b=(--model llama-8b --zero 3 --precision bf16 --micro-batch 1 --act-ckpt --loss tiled --act-ckpt-offload
        --tiled-mlp "${adam[@]}" --seq-len 524288 --set max_position_embeddings=524288 --gpus 4 --sequence-parallel 4
        --steps 1 --warmup 0 --no-comm-log)
sp1b=(--model llama-1b --zero 2 --precision bf16 --micro-batch 1 --act-ckpt --loss tiled "${adam[@]}"
      --seq-len 131072 --set max_position_embeddings=131072 --steps 3 --warmup 1 --no-comm-log)
bigbird=(--sparse-attention bigbird --sparse-set block=128)
z3_1b=(--model llama-1b --zero 3 --micro-batch 4 --grad-accum 4 "${adam[@]}" --steps 3 --warmup 1 --no-comm-log)
pipe=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --zero 1 --precision bf16 --micro-batch 4 "${adam[@]}"
      --steps 5 --warmup 2 --trial-timeout 200 --no-prune)
pipe_run=("${pipe[@]:0:$(( ${#pipe[@]} - 3 ))}")  # PIPE without the sweep's --trial-timeout 200 --no-prune
gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --micro-batch 8 --gpus 2 --steps 20 --warmup 5)
llama1b=(--model llama-1b --micro-batch 4 --grad-accum 2 --gpus 2 "${adam[@]}" --steps 3 --warmup 2)
zpp=zero_optimization
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' >"$rows/hosts-2x1"  # two 1-GPU "nodes" of a 2-GPU host
printf '127.0.0.1 slots=4\n127.0.0.2 slots=4\n' >"$rows/hosts-2x2"  # two 2-GPU "nodes" of a 4-GPU host
nodes2=(--hostfile "$rows/hosts-2x1" --launcher no-ssh --include "127.0.0.1:0@127.0.0.2:1")
nodes4=(--hostfile "$rows/hosts-2x2" --launcher no-ssh --include "127.0.0.1:0,1@127.0.0.2:2,3")

begin() {  # begin PART [FILE...]: its log in $OUT, its rows file, copies of that (and FILE...) into $OUT
  part=$1
  shift
  res=$rows/$part.jsonl
  start_log "$out/$part.log"
  echo "part $part: $(time_left) s left of the command's budget; BEST_ZERO=$best; host $(nproc) cores," \
    "$(free -g | awk '/^Mem:/ {print $2}') GiB; OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}" >>"$log"
  keep_copies --flat "$out" "$res" "$@"
}

dsx_run() {  # dsx_run CAP ARG...: `dsx run ARG...` into $res within CAP s and the time left; its own --timeout is
  # 60 s less (dsx prepares ~20 s before its clock starts and takes up to 40 s to stop a job), so a run cut by time
  # leaves a `timeout` row
  local cap=$1 left
  shift
  left=$(( $(time_left) - 10 ))
  [ "$left" -lt "$cap" ] && cap=$left
  [ "$cap" -ge 120 ] || cap=0  # under 2 minutes left: too little for any run here, run_by logs it as skipped
  run_by "$cap" python3 -m dsx run "$@" --results "$res" --timeout $(( cap > 90 ? cap - 60 : 30 )) "${dry[@]}"
}

dsx_sweep() {  # dsx_sweep CAP ARG...: `dsx sweep ARG...` into $res within CAP s and the time left. --comm-log (the
  # default again): the committed rows of these parts counted with the comms logger, then in their timed steps (before
  # 2026-11-29 a trial's logger counted its timed steps; now a warm-up step); a resumed part keeps the sweep's id
  local cap=$1
  shift
  run_by "$cap" python3 -m dsx sweep --comm-log "$@" --results "$res" "${dry[@]}"
}

finish() {  # the rows' last copy into $OUT, then the part's tables in its log (within what is left of the command:
  # BUDGET_S leaves 30 s): `dsx report --vs-estimate` (predicted against measured) and summary.py
  local t
  stop_copies
  [ -n "${DRY:-}" ] && { show_log; return; }
  if [ -s "$res" ]; then
    t=$(( $(time_left) + 20 ))
    [ "$t" -gt 120 ] && t=120
    [ "$t" -lt 15 ] && t=15
    echo "+ dsx report $res --vs-estimate --format markdown" >>"$log"
    timeout "$t" python3 -m dsx report "$res" --vs-estimate --format markdown >>"$log" 2>&1
    echo "+ python3 bench/multigpu/summary.py $res" >>"$log"
    timeout 30 python3 bench/multigpu/summary.py "$res" >>"$log" 2>&1
  fi
  echo "part $part done, $(time_left) s left" >>"$log"
  show_log
}

pin_probe() {  # how fast this host page-locks memory: 8 GiB in one process, then 4 GiB in each of 4 at once
  local probe='import sys, time, torch
n = int(sys.argv[1]) << 30
t = time.perf_counter(); a = torch.empty(n // 4, dtype=torch.float32, pin_memory=True); pinned = time.perf_counter() - t
t = time.perf_counter(); b = torch.empty(n // 4, dtype=torch.float32); b.zero_(); paged = time.perf_counter() - t
print(f"[pin] {sys.argv[2]}: {n / 2**30:.0f} GiB pinned in {pinned:.2f} s ({n / 2**30 / pinned:.1f} GiB/s); "
      f"pageable + zeroed in {paged:.2f} s ({n / 2**30 / paged:.1f} GiB/s)")'
  timeout 60 python3 -c "$probe" 8 "1 process" >>"$log" 2>&1
  local i pids=()
  for i in 0 1 2 3; do
    timeout 90 python3 -c "$probe" 4 "process $i of 4 at once" >>"$log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
}

init_lines() {  # the DeepSpeed log lines of the last row's initialisation, with their times, and its overhead
  local dir
  dir=$(python3 -c 'import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(rows[-1].get("run_dir") or "" if rows else "")' "$res" 2>/dev/null)
  if [ -n "$dir" ] && [ -f "$dir/launcher.log" ]; then
    grep -E '^\[20[0-9-]+ [0-9:,]+\] \[(INFO|WARNING)\]' "$dir/launcher.log" |
      grep -vE 'config\.py:[0-9]+:print\]' | head -n 80 | sed 's/^/ds-init: /' >>"$log"
  fi
  python3 -c 'import json, sys
r = [json.loads(line) for line in open(sys.argv[1]) if line.strip()][-1]
print("[overhead]", r["status"], {k: round(v, 1) if isinstance(v, float) else v for k, v in r["overhead"].items()})
print("[memory]", {k: v for k, v in r["memory"]["max"].items()})' "$res" >>"$log" 2>&1
}

for p in "$@"; do
  case $p in
    dp2-z1)
      begin "$p"
      dsx_run 330 "${tuned[@]}" --zero 1 --gpus 2
      dsx_run 240 "${tuned[@]}" --zero 1 --gpus 1
      finish
      ;;
    dp2-z2)
      begin "$p"
      dsx_run 330 "${tuned[@]}" --zero 2 --gpus 2
      dsx_run 240 "${tuned[@]}" --zero 2 --gpus 1
      dsx_run 240 "${tuned[@]}" --zero 2 --gpus 2 --no-comm-log
      finish
      ;;
    dp2-z3)
      begin "$p"
      dsx_run 240 "${tuned_z3[@]}" --gpus 2
      dsx_run 240 "${tuned_z3[@]}" --gpus 1
      finish
      ;;
    dp2-default)
      begin "$p"
      [ -n "${DRY:-}" ] || BUILD_S=200 build_ops FusedAdamBuilder  # DeepSpeed's default AdamW on the GPU
      dsx_run 180 "${default[@]}" --zero "$best" --gpus 2
      dsx_run 180 "${default[@]}" --zero "$best" --gpus 1
      dsx_run 180 "${default[@]}" --zero "$best" "${nodes2[@]}"
      finish
      ;;
    nodes2)
      begin "$p"
      dsx_run 330 "${tuned[@]}" --zero "$best" "${nodes2[@]}"
      dsx_run 240 "${tuned[@]}" --zero "$best" --gpus 1
      finish
      ;;
    dp4)
      begin "$p"
      dsx_run 360 "${tuned[@]}" --zero "$best" --gpus 4
      dsx_run 240 "${tuned[@]}" --zero "$best" --gpus 1
      dsx_run 240 "${tuned[@]}" --zero "$best" --gpus 2
      finish
      ;;
    nodes4)
      begin "$p"
      dsx_run 360 "${tuned[@]}" --zero "$best" "${nodes4[@]}"
      dsx_run 240 "${tuned[@]}" --zero "$best" --gpus 1
      finish
      ;;
    dp4-llama)
      begin "$p"
      dsx_run 200 "${llama[@]}" --gpus 4
      dsx_run 200 "${llama[@]}" --gpus 2
      dsx_run 200 "${llama[@]}" --gpus 1
      finish
      ;;
    dp2-llama)
      begin "$p"
      dsx_run 200 "${llama[@]}" --gpus 2
      dsx_run 200 "${llama[@]}" --gpus 1
      finish
      ;;
    long4|sp4-1b)
      begin "$p"
      if [ "$p" = long4 ]; then
        PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True dsx_run 570 "${long8b[@]}"
      fi
      dsx_run 150 "${long1b[@]}" --gpus 4 --sequence-parallel 4
      dsx_run 150 "${long1b[@]}" --gpus 1
      finish
      ;;
    sparse-sp4)
      begin "$p"
      dsx_run 180 "${sp1b[@]}" --gpus 4 --sequence-parallel 4
      dsx_run 180 "${sp1b[@]}" --gpus 4 --sequence-parallel 4 "${bigbird[@]}"
      dsx_run 180 "${sp1b[@]}" --gpus 1 "${bigbird[@]}"
      finish
      ;;
    omp4)
      begin "$p"
      for threads in dsx "$(nproc)" dsx "$(nproc)"; do
        if [ "$threads" = dsx ]; then
          dsx_run 150 "${sp1b[@]}" --gpus 4 --sequence-parallel 4 "${bigbird[@]}"
        else
          OMP_NUM_THREADS=$threads dsx_run 150 "${sp1b[@]}" --gpus 4 --sequence-parallel 4 "${bigbird[@]}"
        fi
      done
      dsx_run 150 "${z3_1b[@]}" --gpus 4
      OMP_NUM_THREADS=$(nproc) dsx_run 150 "${z3_1b[@]}" --gpus 4
      finish
      ;;
    omp4-z3)
      begin "$p"
      OMP_NUM_THREADS=$(nproc) dsx_run 125 "${z3_1b[@]}" --gpus 4
      dsx_run 125 "${z3_1b[@]}" --gpus 4
      OMP_NUM_THREADS=$(nproc) dsx_run 125 "${z3_1b[@]}" --gpus 4
      finish
      ;;
    z3-1b|z3-1b-ckpt)
      begin "$p"
      ckpt=()
      [ "$p" = z3-1b-ckpt ] && ckpt=(--act-ckpt)
      for g in 4 2 1; do
        dsx_run 150 "${z3_1b[@]}" "${ckpt[@]}" --gpus "$g"
      done
      finish
      ;;
    ratio2)
      begin "$p"
      for z in 2 3; do
        for g in 2 1; do
          dsx_run 150 --model llama-3b --zero "$z" --micro-batch 2 --grad-accum 4 "${adam[@]}" --steps 3 --warmup 1 \
            --no-comm-log --gpus "$g"
        done
      done
      finish
      ;;
    z3-4v1)
      begin "$p"
      dsx_run 150 "${tuned_z3[@]}" --gpus 4
      dsx_run 150 "${tuned_z3[@]}" --gpus 1
      dsx_run 150 "${z3_1b[@]}" --act-ckpt --gpus 4
      dsx_run 150 "${z3_1b[@]}" --act-ckpt --gpus 1
      finish
      ;;
    pipe2)
      begin "$p"
      dsx_sweep 560 "${pipe[@]}" --gpus 2 --pipeline-stages 2 --grad-accum "${PIPE_M:-1,4,16}"
      finish
      ;;
    pipe2-dp)
      begin "$p"
      dsx_sweep 560 "${pipe[@]}" --gpus 2 --grad-accum "${PIPE_M:-1,4,16}"
      finish
      ;;
    pipe4)
      begin "$p"
      dsx_sweep 560 "${pipe[@]}" --gpus 4 --pipeline-stages 4 --grad-accum "${PIPE_M:-4,16}"
      finish
      ;;
    pipe2x2)
      begin "$p"
      dsx_sweep 560 "${pipe[@]}" --gpus 4 --pipeline-stages 2 --grad-accum "${PIPE_M:-4,16}"
      finish
      ;;
    pipe4-dp)
      begin "$p"
      dsx_sweep 560 "${pipe[@]}" --gpus 4 --grad-accum "${PIPE_M:-4,16}"
      finish
      ;;
    pipe4-omp)
      begin "$p"
      for shape in "--pipeline-stages 4" ""; do
        # shellcheck disable=SC2086  # $shape: no words or two
        dsx_run 170 "${pipe_run[@]}" --gpus 4 $shape --grad-accum 16
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=$(nproc) dsx_run 170 "${pipe_run[@]}" --gpus 4 $shape --grad-accum 16
      done
      dsx_run 170 "${pipe_run[@]}" --gpus 4 --pipeline-stages 4 --grad-accum 4
      finish
      ;;
    onebit2)
      begin "$p"
      if [ -n "${DRY:-}" ]; then
        lane18=$(command -v python3)
      else
        source bench/onebit/lane18.sh "${WHEELHOUSE18:-.whl18}" || { show_log; exit 1; }
        "$lane18" -c "import deepspeed, cupy; print('lane', deepspeed.__version__, 'cupy', cupy.__version__)" \
          >>"$log" 2>&1
      fi
      # the lane: plain data parallel Adam against the three 1-bit optimizers, all fp16 without ZeRO
      dsx_run 120 "${gpt2[@]}" --python "$lane18" --zero 0 --precision fp16 "${adam[@]}"
      for onebit in adam zero-one-adam lamb; do
        dsx_run 150 "${gpt2[@]}" --python "$lane18" --onebit "$onebit"
      done
      # DeepSpeed 0.19.8: ZeRO-2 with and without the comms logger (its cost on NCCL)
      dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}"
      dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}" --no-comm-log
      finish
      ;;
    logger2)
      begin "$p"
      dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}"
      dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}" --no-comm-log
      finish
      ;;
    comm2)
      begin "$p"
      # the comms logger's cost per stage (it synchronises after every collective) and ZeRO-3 across GPUs without
      # it (zeropp2's rows all ran with it): on/off pairs at ZeRO-1, 2, 3, then ZeRO-3 on 1 GPU
      for z in 1 2 3; do
        dsx_run 120 "${gpt2[@]}" --zero "$z" "${adam[@]}"
        dsx_run 120 "${gpt2[@]}" --zero "$z" "${adam[@]}" --no-comm-log
      done
      dsx_run 120 "${gpt2[@]}" --zero 3 "${adam[@]}" --no-comm-log --gpus 1  # the last --gpus wins
      finish
      ;;
    logger-z3)
      begin "$p"
      # out of sample for the logger's per-fetch price (dsx.calibration.COMM_LOGGER_S_PER_FETCH, from GPT-2 124M):
      # dp2-z3's gpt2-xl on 2 GPUs with the logger, then without it
      dsx_run 180 "${tuned_z3[@]/--no-comm-log/--comm-log}" --gpus 2
      dsx_run 180 "${tuned_z3[@]}" --gpus 2
      finish
      ;;
    logger-warm)
      begin "$p"
      # the logger out of the timed steps (dsx.rank.comms): logger-z3's pair again, dsx's default before and after
      dsx_run 150 "${tuned_z3[@]/--no-comm-log/--comm-log}" --gpus 2
      dsx_run 150 "${tuned_z3[@]}" --gpus 2
      dsx_run 170 "${tuned_z3[@]/--no-comm-log/--comm-log}" --gpus 2 --warmup 1
      dsx_run 150 "${tuned_z3[@]/--no-comm-log/--comm-log}" --gpus 2
      finish
      ;;
    host2)
      begin "$p"
      python3 bench/estimator/host_probe.py >>"$log" 2>&1
      for z in 1 3; do
        dsx_run 120 "${gpt2[@]}" --zero "$z" "${adam[@]}"
        dsx_run 120 "${gpt2[@]}" --zero "$z" "${adam[@]}" --gpus 1  # the last --gpus wins
      done
      dsx_run 150 "${tuned_z3[@]/--no-comm-log/--comm-log}" --gpus 2
      dsx_run 150 "${tuned_z3[@]}" --gpus 1
      python3 bench/estimator/host_probe.py >>"$log" 2>&1
      finish
      ;;
    autocast2)
      begin "$p"
      for prec in bf16 bf16-autocast; do
        dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}" --precision "$prec"
      done
      for z in 2 3; do
        for prec in bf16 bf16-autocast; do
          dsx_run 150 "${llama1b[@]}" --zero "$z" --precision "$prec"
        done
      done
      finish
      ;;
    conv1d2)
      begin "$p"
      conv1d=(--ds-set 'torch_autocast.lower_precision_safe_modules=["torch.nn.Linear","transformers.pytorch_utils.Conv1D"]')
      dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}" --precision bf16
      for i in 1 2; do
        dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}" --precision bf16-autocast
        dsx_run 120 "${gpt2[@]}" --zero 2 "${adam[@]}" --precision bf16-autocast "${conv1d[@]}"
      done
      finish
      ;;
    replay2)
      begin "$p"
      dsx_run 130 "${llama1b[@]}" --zero 3 --ds-set $zpp.stage3_prefetch_bucket_size=0
      dsx_run 130 "${llama1b[@]}" --zero 3 --ds-set $zpp.stage3_max_reuse_distance=0 \
        --ds-set $zpp.stage3_prefetch_bucket_size=200000000
      dsx_run 130 "${llama1b[@]}" --zero 3 --act-ckpt
      finish
      ;;
    replay3)
      begin "$p"
      xl_logged=("${tuned_z3[@]/--no-comm-log/--comm-log}" --gpus 2)
      at3e8=(--ds-set $zpp.stage3_max_live_parameters=300000000 --ds-set $zpp.stage3_max_reuse_distance=300000000)
      dsx_run 140 "${xl_logged[@]}" --ds-set $zpp.stage3_max_reuse_distance=0 \
        --ds-set $zpp.stage3_prefetch_bucket_size=200000000
      dsx_run 130 "${llama1b[@]}" --zero 3 "${at3e8[@]}" --act-ckpt
      dsx_run 140 "${xl_logged[@]}" --act-ckpt
      dsx_run 130 "${llama1b[@]}" --zero 3 "${at3e8[@]}"
      finish
      ;;
    zeropp2)
      begin "$p"
      dsx_run 120 "${gpt2[@]}" --zero 3 "${adam[@]}"
      if [ -n "${DRY:-}" ] || BUILD_S=240 build_ops QuantizerBuilder; then
        dsx_run 150 "${gpt2[@]}" --zero 3 "${adam[@]}" --ds-set $zpp.zero_quantized_weights=true
        dsx_run 150 "${gpt2[@]}" --zero 3 "${adam[@]}" --ds-set $zpp.zero_hpz_partition_size=2
        dsx_run 150 "${gpt2[@]}" --zero 3 "${adam[@]}" --ds-set $zpp.zero_quantized_weights=true \
          --ds-set $zpp.zero_quantized_gradients=true --ds-set $zpp.zero_hpz_partition_size=2
      else
        echo "skipped: the ZeRO++ runs (DeepSpeed's quantizer op did not build)" >>"$log"
      fi
      finish
      ;;
    sweep4)
      begin "$p"
      axes=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --gpus 4 --zero 1,2,3 --pipeline-stages none,2,4
            --grad-accum 16 --micro-batch auto --mb-max 8 --keep-within 0.25 --gpu-kind h100-80gb "${adam[@]}"
            --steps 3 --warmup 1 --trial-timeout 200)
      echo "+ python3 -m dsx sweep ${axes[*]} --dry-run" >>"$log"
      timeout 120 python3 -m dsx sweep "${axes[@]}" --results "$res" --dry-run >>"$log" 2>&1
      [ -n "${DRY:-}" ] || dsx_sweep 540 "${axes[@]}"
      finish
      ;;
    largest4|largest4-omp)
      begin "$p" "$rows/$p.json"
      if [ "$p" = largest4-omp ]; then
        # OpenMP threads per rank = the cores shared out (DeepSpeed's CPU Adam is OpenMP; for GPU ranks neither dsx
        # nor DeepSpeed's launcher sets OMP_NUM_THREADS, so 4 ranks each start one thread per core)
        export OMP_NUM_THREADS=$(( $(nproc) >= 8 ? $(nproc) / 4 : 2 )) OMP_WAIT_POLICY=PASSIVE
        echo "OMP_NUM_THREADS=$OMP_NUM_THREADS OMP_WAIT_POLICY=PASSIVE for the ranks" >>"$log"
      fi
      if [ -z "${DRY:-}" ]; then
        BUILD_S=200 build_ops CPUAdamBuilder  # the offloaded optimizer's step
        free -g >>"$log"
        # how fast the host page-locks memory (measured in largest4-omp.log; PIN_PROBE=1 measures it again)
        [ "${PIN_PROBE:-0}" = 1 ] && pin_probe
      fi
      # the answer for this host's GPUs (dsx's kind of the visible GPU: h100-80gb, or h200-141gb on an H200 host,
      # whose 141 GB change the answer) and its RAM (free -b); LARGEST_MIN_TFLOPS (e.g. 100): the largest model
      # predicted at that many model TFLOP/s per GPU or more (issue 30's target), not the largest that trains at all
      # LARGEST_CAP (e.g. 70GiB): plan for less than the card, a step down from the rung whose first try (2026-11-27,
      # 34B at 72.8 of 79.2 GiB predicted) flushed the allocator's cache every step at the memory limit
      # --host-memory: this host's RAM, given (dsx estimate assumes the kind's calibration host, 125 GiB, when the
      # visible GPUs are not of --gpu-kind: on 4 x H200 it answered 16.9B for a 125 GiB host, 2026-11-27)
      estimate=(python3 -m dsx estimate --model llama-8b --largest --gpus 4 --json
                --host-memory "$(free -b | awk '/^Mem:/ {print $2}')" ${LARGEST_CAP:+--memory-cap "$LARGEST_CAP"}
                ${LARGEST_MIN_TFLOPS:+--min-tflops "$LARGEST_MIN_TFLOPS"})
      echo "+ ${estimate[*]}" >>"$log"
      if timeout 180 "${estimate[@]}" >"$rows/$p.json" 2>>"$log"; then
        cat "$rows/$p.json" >>"$log"
        mapfile -t axes < <(python3 bench/largest/axes.py "$rows/$p.json")
        echo "proposed: ${axes[*]}" >>"$log"
        # one configuration at the proposed micro-batch (smaller only if it runs out of memory)
        trial_s=$(( $(time_left) - 70 ))  # the trial ends (with its row) before the command's deadline
        [ "$trial_s" -gt 480 ] && trial_s=480
        # --retry-failed: a trial that timed out in an earlier command runs again (the results file is the state);
        # 2 timed steps after 1: at 30B a step takes 20-60 s and deepspeed.initialize up to 2 minutes
        # --no-comm-log: the comms logger synchronises after each of ZeRO-3's thousands of collectives a step (the
        # 16.9B row with it: 91.5 s a step, 2.2x the prediction; its bytes matched dsx.comm's to 0.5%)
        dsx_sweep 560 "${axes[@]}" --steps 2 --warmup 1 --trial-timeout "$trial_s" --retry-failed \
          --no-comm-log
        [ -n "${DRY:-}" ] || init_lines
      fi
      finish
      unset OMP_NUM_THREADS OMP_WAIT_POLICY
      ;;
    *)
      echo "bench/multigpu/run.sh: unknown part '$p' ($usage)" >&2
      exit 2
      ;;
  esac
done
