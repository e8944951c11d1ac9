"""The H200's grad-accum ladders: one model's steps at grad-accum 1 and 4 on one machine, which split a step into what
it pays once and what each micro-batch costs (bench/estimator/ladder.sh, bench/estimator/terms.md). They set
H200.fixed_s_per_param and H200.micro_batch_s_per_param (bench/estimator/calibrate.py: calibrate_step,
calibrate_micro_batch); dsx.calibration_roles names their rows 'step calibration'."""

from __future__ import annotations

H200_STEP_LADDERS = (  # (file, grad-accum 1 run, grad-accum 4 run): one model on one machine
    ("bench/estimator/h200_ladder_llama/ladder.jsonl",  # llama-1b mb 2: 162.0, 431.3 ms
     "3647477ac3f744fa90e5e66e9cfa0dc4", "5bd88d2128564e01851d0d7a77601e38"),
    ("bench/estimator/h200_ladder_llama3b/ladder.jsonl",  # llama-3b mb 1: 224.6, 562.5 ms
     "c12f67cd0334433fa1136effcb68f222", "fce0eed10cb147acaafc8ef3a6ec7a49"),
    ("bench/estimator/h200_ladder_split/ladder.jsonl",  # llama-3b: 242.9, 521.6 ms
     "1abb8275bbac4720b0aae2ef5e7dd934", "64aaee6af35e497585146b6f228fc037"),
    ("bench/estimator/h200_ladder_split/ladder.jsonl",  # llama-1b: 121.9, 376.3 ms
     "02566f7d549a4796a57e770d6dc33cc1", "6b7187795efc413a92432e71dddab571"),
    ("bench/estimator/h200_ladder_split/ladder.jsonl",  # gpt2-xl mb 8: 327.3, 1,063.7 ms
     "fa7c82c85223478f945db28d084bde07", "ff46535fde1f4391a13ea2cb9eb5dfdc"),
    ("bench/estimator/h200_ladder_b/ladder.jsonl",  # llama-3b: 205.0, 549.4 ms
     "70a753e798bc4168a05a247d88a11bc9", "cf5fa1f553a34dc08071a1b9170e2c71"),
    ("bench/estimator/h200_ladder_b/ladder.jsonl",  # llama-1b: 123.1, 378.9 ms
     "cb67b2e407f94397aeaa923c57197be8", "2f4c73eb79dd4b86a1b662774c5bf134"),
    ("bench/estimator/h200_ladder_b/ladder.jsonl",  # gpt2-xl: 336.9, 1,012.8 ms
     "d66b2266f82c434da9856345156a9789", "477625506e6c4759b4c37b640ed7dd6e"),
    ("bench/estimator/h200_ladder_c/ladder.jsonl",  # llama-3b: 204.2, 543.6 ms
     "025d3540b50c44578d0970a3ec0a312b", "df44284d6c2149b2852728e037bc6672"),
    ("bench/estimator/h200_ladder_c/ladder.jsonl",  # llama-1b: 124.7, 390.2 ms
     "d04df4a5853e4c6d8f17305cdcba9526", "a1d95abc196d4ad9a8f2a92fc531863b"),
    ("bench/estimator/h200_ladder_c/ladder.jsonl",  # gpt2-xl: 332.8, 1,057.7 ms
     "0dccf606ab8a4749a3973bfc812b29fd", "b1bd66f6b844481ca41845bf76c09440"),
    ("bench/estimator/h200_ladder_d/ladder.jsonl",  # llama-3b: 205.8, 560.1 ms
     "a8bdc97707264d4ea468937a2ca05d70", "78dec06907074ac38ecf34cad4c1d647"),
    ("bench/estimator/h200_ladder_d/ladder.jsonl",  # llama-1b: 121.9, 379.2 ms
     "9c80e6d87b474e1faefcec7a13b61bb7", "56261663207049a29c3d4158ee938a03"),
    ("bench/estimator/h200_ladder_d/ladder.jsonl",  # gpt2-xl: 321.2, 1,022.0 ms
     "d449e0c54ef94e19807e8938ffa23b99", "0a3b1eb4f7c5404ab3b8bbe11bd1557c"),
)
"""Grad-accum ladders on one H200 (bench/estimator/ladder.sh: ZeRO-1, bf16 with the overflow check, clipping 1.0,
torch's fused AdamW, eager, GPT-2's dropout): llama-1b at micro-batch 2, llama-3b at 1, gpt2-xl at 8, each at
grad-accum 1 and 4, on six machines (2026-11-29 two, 2026-11-30 `split`, 2026-12-01 b, c, d: a fresh machine a
command). A ladder's intercept (the step less its micro-batches) is what a step pays once: 36-72 ms for llama-1b,
88-150 for llama-3b, 82-112 for gpt2-xl, where a price per parameter alone (the CALIBRATION_ROWS' intercept) said
104, 258 and 174. On the ladders' median machine the intercept less the overflow check is 1.75-2.00e-11 s a
parameter for all three models: H200.fixed_s_per_param, the median (bench/estimator/calibrate.py: calibrate_step).
What the CALIBRATION_ROWS' machines paid besides it (gpt2-xl: 84 of 174 ms) is host work that varies between
machines, priced per tensor (H200.step_s_per_tensor): the slow 2026-11-29 machines paid llama-3b 21 ms and llama-1b
35 ms more than the median, which gpt2-xl's excess per tensor puts at 37 and 21 ms and per parameter at 173 and 67.
The slopes hold a cost per micro-batch besides the compute, which H200_MICRO_BATCH_LADDERS separate."""


H200_MICRO_BATCH_LADDERS = (  # (file, micro-batch a at grad-accum 1 and 4, micro-batch b at 1 and 4): one machine
    ("bench/estimator/h200_mb_ga_ladder/ladder.jsonl",  # llama-3b mb 1: 227.9, 572.2; mb 4: 483.7, 1,623.5 ms
     "c53b3e092efd4f8980487a25dd2b0ec0", "0020a12f052541e291d6045489d8413c",
     "fe2dc568981045b6bf503ed72cc1db08", "33b0ee6f34c34e1f9a3840edc7e2b869"),
    ("bench/estimator/h200_mb_ga_ladder/ladder.jsonl",  # llama-1b mb 2: 124.3, 385.3; mb 8: 351.8, 1,288.1 ms
     "46f7726f1376491d83f10d014563e14b", "a684746730a54198a538f419ef7d6278",
     "2e8b51b14b214adbaea6abca488f1dad", "1ea40b5d2e704aa99b35a299773771b4"),
    ("bench/estimator/h200_mb_ga_ladder_b/ladder.jsonl",  # gpt2-xl mb 2: 262.9, 469.8; mb 8: 356.0, 1,005.1 ms
     "b24803c9bc194478a30c78da61a75bbb", "c226db45cdd34e6eb39e0f9b79a28d3c",
     "9237c3e8dbe849cb85a697c8ce845c64", "7615a4f3da854adc91af22a852d968f8"),
    ("bench/estimator/h200_mb_ga_ladder_c/ladder.jsonl",  # llama-3b mb 1: 244.1, 626.8; mb 4: 489.5, 1,649.6 ms
     "fedda959dada429197f38c38b4bfcc35", "f97edd1d5eee4f49befb0942b9cceaea",
     "3b4c718664834b26b37ec4b2509eeeb3", "1b334dc80ce742f6af70da1fd05598cf"),
    ("bench/estimator/h200_mb_ga_ladder_c/ladder.jsonl",  # gpt2-xl mb 4: 301.1, 756.7; mb 8: 384.0, 1,083.8 ms
     "9adcedf5da1449ab84222bda039450c6", "8369b4a0aeeb421ca4d97085d5aacd02",
     "928855552fdf4eae9df6451bda021cd3", "d6677281138a4133be5a397e9641b966"),
)
"""Grad-accum ladders of one model at two micro-batches on one H200 (2026-12-01, three fresh machines: a, b, c;
ZeRO-1, otherwise as H200_STEP_LADDERS). Each micro-batch's slope is a cost per micro-batch plus the micro-batch's
samples; two micro-batches separate them: llama-1b 12.0 ms a micro-batch (9.7e-12 s a parameter), llama-3b 26.4 and
41.2 ms (8.2e-12, 12.8e-12), gpt2-xl 19.8 and 70.5 ms (1.27e-11, 4.53e-11: eager GPT-2 with dropout launches many
small kernels, and its micro-batches of 2 and 4 wait on the host). H200.micro_batch_s_per_param is the median over
the models of each model's median (bench/estimator/calibrate.py: calibrate_micro_batch). Beside them on machine b,
llama-1b at micro-batch 2 and ZeRO-0, -2, -3: slopes 85.0, 86.3 and 270.5 ms against ZeRO-1's 87.0 on machine a (the
cost is the same at ZeRO 0-2; ZeRO-3's hooks are priced apart)."""

H200_ZERO3_LADDERS = (  # (file, a ZeRO-3 row at grad-accum 1, the same at 4): one model and micro-batch on one machine
    ("bench/estimator/h200_zero3_ladder/ladder.jsonl",  # llama-1b mb 2: 290.3, 836.2 ms
     "60d6927ffd7a4ff0a832b0731949b22c", "53fcb665f43842688fd04dc29ffb47d4"),
    ("bench/estimator/h200_zero3_ladder/ladder.jsonl",  # llama-1b mb 8: 348.8, 1,317.5 ms
     "55504a2597604257a0a2e4b049c1f138", "393e3f13fa294b3295cb27a319b9dee2"),
    ("bench/estimator/h200_zero3_ladder/ladder.jsonl",  # gpt2-xl mb 2: 692.3, 1,874.2 ms
     "4ed0b8f9fbd2425987fd7f653120fc03", "6c6da91ca17044b4a48a7c62ac009b50"),
    ("bench/estimator/h200_zero3_ladder/ladder.jsonl",  # llama-3b mb 1: 533.2, 1,542.4 ms
     "01fc3243d05b4aa087c202c9f17986b4", "c4446c7caa024104b94a5be3bb78392a"),
    ("bench/estimator/h200_zero3_ladder_b/ladder.jsonl",  # llama-1b mb 4: 341.8, 1,026.7 ms
     "08afbebda15249d28b8b199042f35233", "f210b0d8192349169f574246fb5ef8c8"),
    ("bench/estimator/h200_zero3_ladder_b/ladder.jsonl",  # gpt2-xl mb 8: 664.8, 2,412.3 ms
     "1e629487f9b9482eba55be574daf5406", "08c477a26fe64f9db2b7157badee4082"),
    ("bench/estimator/h200_mb_ga_ladder_b/ladder.jsonl",  # llama-1b mb 2: 241.0, 1,052.5 ms
     "1c6c7b054ff344378b53def73fae0674", "3b394cd50b714c5fab899e44e77dd537"),
)
"""Grad-accum ladders at ZeRO-3 on one H200 (2026-12-01, three fresh machines, ZeRO-3, otherwise as
H200_STEP_LADDERS; the last pair from H200_MICRO_BATCH_LADDERS' machine b). Each slope less the estimate's slope
without the hooks is what the hooks showed beyond a micro-batch's compute (95 ms for llama-1b at micro-batch 2, 15 at
8, where the host waits for the GPU: bench/estimator/terms.md, "ZeRO-3's hooks behind the compute"): each pair's
price per module and pass, scaled to the ladders' median host speed, and their median are H200.zero3_s_per_module_pass
and H200.host_loop_ns (bench/estimator/calibrate.py: calibrate_zero3_hooks)."""

H200_LADDER_RUN_IDS = frozenset(run_id for ladders in (H200_STEP_LADDERS, H200_MICRO_BATCH_LADDERS, H200_ZERO3_LADDERS)
                                for _, *ids in ladders for run_id in ids)
"""Every row of H200_STEP_LADDERS, H200_MICRO_BATCH_LADDERS and H200_ZERO3_LADDERS (calibration_role: 'step
calibration')."""
