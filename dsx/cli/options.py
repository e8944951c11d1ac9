"""Options shared by several commands."""

from __future__ import annotations

import click

from dsx.config_facts import PRECISIONS
from dsx.units import parse_size
from dsx.versions import Version, VersionError, resolve_target


CHOICE_DEVICES = click.Choice(["none", "cpu", "nvme"])


class FiniteFloat(click.ParamType):
    """A float flag that refuses inf and nan (and 1e400, which is inf): JSON has no such numbers, and no training
    step can use them."""

    name = "float"

    def convert(self, value, param, ctx):
        import math

        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


FINITE_FLOAT = FiniteFloat()

# The DeepSpeed-config choices `dsx config` and `dsx run` share (keys of dsx.generate.ConfigRequest).
_DS_CONFIG_OPTIONS = (
    click.option("--zero", type=click.IntRange(0, 3), help="ZeRO stage 0-3 (default 2)."),
    click.option("--offload", type=CHOICE_DEVICES, help="Where the optimizer states and step live (default none)."),
    click.option("--offload-params", type=CHOICE_DEVICES, help="Where ZeRO-3 keeps parameters (default none)."),
    click.option("--nvme-path", help="Directory on a local NVMe drive for NVMe offload."),
    click.option("--precision", type=click.Choice(PRECISIONS),
                 help="Training precision (default bf16). bf16-autocast: fp32 weights, bf16 matrix products under "
                      "torch.autocast (DeepSpeed's torch_autocast section), no per-tensor overflow check."),
    click.option("--micro-batch", type=click.IntRange(min=1), help="Samples per GPU per forward/backward (default 1)."),
    click.option("--grad-accum", type=click.IntRange(min=1), help="Gradient accumulation steps (default 1)."),
    click.option("--optimizer", help="Optimizer type: AdamW (default; DeepSpeed's FusedAdam), Adam, Lamb, Lion, "
                                     "Adagrad, Muon, ..."),
    click.option("--lr", type=FINITE_FLOAT, help="Learning rate (default 1e-4)."),
)


def ds_config_options(f):
    for option in reversed(_DS_CONFIG_OPTIONS):
        f = option(f)
    return f


_MODEL_OPTIONS = (
    click.option("--model", required=True, metavar="PRESET",
                 help="Model preset (dsx models lists them), e.g. gpt2-tiny."),
    click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                 help="Override a transformers config attribute, e.g. --set n_layer=8 (VALUE is JSON)."),
    click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length (default: the preset's)."),
    click.option("--vocab-pad", type=click.IntRange(min=1), help="Pad the vocabulary to a multiple of N (e.g. 64)."),
)


def model_options(f):
    """The model a `dsx run` trains and `dsx estimate` predicts: a preset and its overrides."""
    for option in reversed(_MODEL_OPTIONS):
        f = option(f)
    return f


def config_source_options(f):
    """Where the DeepSpeed config comes from: a JSON file as is, or a dsx config preset + flags + --ds-set keys."""
    f = click.option("--ds-set", "ds_sets", multiple=True, metavar="KEY=VALUE",
                     help="Set a DeepSpeed config key, e.g. --ds-set optimizer.params.torch_adam=true "
                          "(VALUE is JSON).")(f)
    f = ds_config_options(f)
    f = click.option("--preset", "ds_preset", help="dsx config preset to start from (dsx config --list).")(f)
    return click.option("--config", "config_path", type=click.Path(dir_okay=False), metavar="FILE",
                        help="Use this DeepSpeed JSON as is (no \"auto\"); excludes the config flags below.")(f)


def sparse_options(f):
    """--sparse-attention and --sparse-set (dsx.sparse): dsx run takes one word, dsx sweep a list of them."""
    f = click.option("--sparse-set", "sparse_sets", multiple=True, metavar="KEY=VALUE",
                     help="A key of the sparse_attention layout block, e.g. --sparse-set num_random_blocks=2 "
                          "(VALUE is JSON).")(f)
    return click.option("--sparse-attention", "sparse_attention", metavar="MODE",
                        help="Block-sparse attention applied by dsx (FlexAttention on CUDA, a masked SDPA on CPU): "
                             "none, dense, fixed, variable, bigbird, bslongformer, local; auto (or auto:MODE) runs "
                             "it only where predicted faster than dense. A --config file's sparse_attention block "
                             "does the same.")(f)


ACT_CKPT_WORDS = {"off": "off", "none": "off", "on": "on", "cpu": "cpu"}
"""The words --act-ckpt takes in every command ("none" is dsx config's first spelling of off)."""
ACT_CKPT_CPU_ONLY_IN_CONFIG = (
    "'cpu' (DeepSpeed's CPU activation checkpointing) is for dsx config, for models that call "
    "deepspeed.checkpointing; dsx's transformers models checkpoint with gradient_checkpointing_enable: use on")


def act_ckpt_word(text: str, *, cpu: bool = False) -> str:
    """'off', 'on' or (where cpu is allowed) 'cpu' for one --act-ckpt word; ValueError says what is accepted."""
    word = ACT_CKPT_WORDS.get(str(text).strip().lower())
    if word == "cpu" and not cpu:
        raise ValueError(ACT_CKPT_CPU_ONLY_IN_CONFIG)
    if word is None:
        raise ValueError(f"{text!r} is not {'on/off/cpu' if cpu else 'on/off'}")
    return word


class ActCkpt(click.ParamType):
    """One --act-ckpt word (act_ckpt_word)."""

    name = "act_ckpt"

    def __init__(self, cpu: bool = False):
        self.cpu = cpu

    def convert(self, value, param, ctx):
        try:
            return act_ckpt_word(value, cpu=self.cpu)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def act_ckpt_option(help_text: str, *, cpu: bool = False, default: str | None = "off"):
    """--act-ckpt with the same words everywhere (dsx sweep takes a list of them): bare means on."""
    return click.option("--act-ckpt", type=ActCkpt(cpu), is_flag=False, flag_value="on", default=default,
                        show_default=default is not None, metavar="[off|on|cpu]" if cpu else "[off|on]",
                        help=help_text)


def gpu_kind_options(old_name: str, help_text: str):
    """--gpu-kind KIND: the calibrated GPU kind the estimates are for, one name in every command (--gpus is always
    a count); OLD_NAME, its earlier name in this command, stays as a hidden alias."""
    def decorate(f):
        f = click.option(old_name, "gpu_kind_old", metavar="KIND", hidden=True)(f)
        return click.option("--gpu-kind", metavar="KIND", help=help_text)(f)
    return decorate


def pick_gpu_kind(gpu_kind: str | None, gpu_kind_old: str | None, old_name: str) -> str | None:
    """The GPU kind given as --gpu-kind or by its old name (both: they must agree), checked against the
    calibrated kinds; None when neither was given."""
    from dsx.calibration import GPUS

    if gpu_kind and gpu_kind_old and gpu_kind != gpu_kind_old:
        raise click.UsageError(f"--gpu-kind {gpu_kind} and {old_name} {gpu_kind_old} conflict: {old_name} is the old "
                               "name of --gpu-kind; give one")
    kind, flag = (gpu_kind, "--gpu-kind") if gpu_kind else (gpu_kind_old, old_name)
    if kind is not None and kind not in GPUS:
        count_hint = "; --gpus N is the number of GPUs" if kind.isdigit() else ""
        raise click.UsageError(f"unknown {flag} '{kind}': kinds are {', '.join(GPUS)} (--memory-cap SIZE "
                               f"estimates a smaller GPU of that kind{count_hint})")
    return kind


class Size(click.ParamType):
    """A byte count: 123456, 512MiB, 40GiB, 1.5GB (dsx.units.parse_size)."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = Size()


def target_option(f):
    return click.option(
        "--target-deepspeed", "target", metavar="VERSION", default=None,
        help="DeepSpeed version the config is for (default: the installed one, else the newest dsx knows).",
    )(f)


def resolve_target_or_fail(text: str | None) -> Version:
    try:
        return resolve_target(text)
    except VersionError as exc:
        raise click.UsageError(str(exc)) from None


_PIPELINE_OPTIONS = (
    click.option("--pipeline-stages", type=click.IntRange(min=1), metavar="N",
                 help="Run the model (GPT-2, Llama) as a DeepSpeed pipeline of N stages (deepspeed.pipe."
                      "PipelineModule); the ranks must be a multiple of N (N x data-parallel replicas); ZeRO 0/1; "
                      "--grad-accum is the micro-batches per step."),
    click.option("--pipeline-partition", metavar="parameters|uniform|type:REGEX",
                 help="How DeepSpeed splits the layers over the stages (partition_method; default parameters)."),
)


def pipeline_options(f):
    """--pipeline-stages and --pipeline-partition (dsx run, dsx estimate)."""
    for option in reversed(_PIPELINE_OPTIONS):
        f = option(f)
    return f


_NODE_OPTIONS = [
    click.option("--hostfile", type=click.Path(dir_okay=False), metavar="FILE",
                 help="Run over the nodes of a DeepSpeed hostfile ('HOST slots=N' lines); --gpus is then the "
                      "ranks per node."),
    click.option("--launcher", type=click.Choice(["pdsh", "openmpi", "slurm", "no-ssh"]), default="pdsh",
                 show_default=True,
                 help="DeepSpeed's multi-node launcher; no-ssh starts every node's runner from this machine "
                      "(hostfile nodes that are this machine, e.g. 127.0.0.1 and 127.0.0.2)."),
    click.option("--include", metavar="SPEC", help="DeepSpeed's --include: host1:0,1@host2 (slots per host)."),
    click.option("--exclude", metavar="SPEC", help="DeepSpeed's --exclude, same syntax."),
    click.option("--num-nodes", type=click.IntRange(min=1), help="Use the first N hosts of the hostfile."),
    click.option("--master-addr", metavar="ADDR",
                 help="Rank 0's address (default: 127.0.0.1, or the first host of the hostfile)."),
    click.option("--master-port", type=click.IntRange(1, 65535), help="Rank 0's port (default: a free one)."),
    click.option("--ssh-port", type=click.IntRange(1, 65535), help="ssh port of the nodes (pdsh, the ssh check)."),
]


def node_options(f):
    """The multi-node flags of dsx run and dsx sweep (DeepSpeed's runner does the launching)."""
    for option in reversed(_NODE_OPTIONS):
        f = option(f)
    return f



_HOST_OPTIONS = (
    click.option("--host-memory", type=SIZE, metavar="SIZE",
                 help="RAM of the host the ranks share, to plan for another machine (default: this machine's; "
                      "dsx estimate where no GPU of its --gpu-kind is: that kind's calibration host, 125 GiB)."),
    click.option("--nvme-free", type=SIZE, metavar="SIZE",
                 help="Free space of the NVMe offload path (default: measured under the config's nvme_path)."),
    click.option("--link-bandwidth", type=click.FloatRange(min=0, min_open=True, max=1e5), metavar="GB/S",
                 help="NCCL's bus bandwidth between the ranks in GB/s (nccl-tests' all_reduce_perf 'busbw'; across "
                      "nodes, your network's): what the collectives take in the estimate. Default: the GPU kind's "
                      "NVLink, measured between two GPUs of one host."),
)


def host_options(f):
    """--host-memory, --nvme-free and --link-bandwidth: the host's capacities a fit is judged against and the link
    between its ranks (dsx estimate, dsx sweep)."""
    for option in reversed(_HOST_OPTIONS):
        f = option(f)
    return f


_LONG_CONTEXT_OPTIONS = (
    click.option("--loss", type=click.Choice(["plain", "tiled", "fused"]), default="plain", show_default=True,
                 help="tiled: the causal-LM loss a tile of tokens at a time, never the whole [tokens, vocab] logits "
                      "(the same loss and gradients; for long sequences). fused: Liger Kernel's fused linear "
                      "cross-entropy, the logits a chunk at a time (pip install 'dsx[kernels]'; CUDA, ZeRO 0-2; kept "
                      "out of --compile's graph; as fast as the plain head on an H100, the tiled loss is slower: "
                      "bench/long/README.md)."),
    click.option("--sequence-parallel", type=click.IntRange(min=1), metavar="N",
                 help="Ulysses sequence parallelism: N ranks share each micro-batch, each holding 1/N of its sequence "
                      "(DeepSpeed's UlyssesSPAttentionHF; heads and sequence length must divide by N)."),
    click.option("--loss-tile-tokens", type=click.IntRange(min=1), metavar="N",
                 help="Tokens per tile of --loss tiled (default: 512 MiB of fp32 logits)."),
    click.option("--act-ckpt-offload", is_flag=True,
                 help="With --act-ckpt: keep each checkpointed layer's input in host memory (pinned), not on the GPU "
                      "(ALST's checkpoint offload; the same gradients)."),
    click.option("--tiled-mlp", is_flag=True,
                 help="Llama MLPs a slice of tokens at a time (DeepSpeed's TiledMLP): no whole [tokens, "
                      "intermediate] tensors (the same gradients; the MLP is recomputed in the backward pass)."),
)


_KERNEL_OPTIONS = (
    click.option("--kernels", type=click.Choice(["none", "liger"]), default="none", show_default=True,
                 help="liger: Liger Kernel's Triton kernels for Llama models (RoPE, RMSNorm, SwiGLU, fused linear "
                      "cross-entropy; pip install 'dsx[kernels]'). CUDA only."),
    click.option("--fp8", type=click.Choice(["none", "tensorwise", "rowwise"]), default="none", show_default=True,
                 help="torchao's float8 training of the decoder's linear layers (pip install 'dsx[fp8]'): an FP8 GPU "
                      "(H100, H200, L4, L40), ZeRO 0-2. Changes the arithmetic: dsx check reports the difference."),
)


def kernel_options(f):
    """--kernels and --fp8 (dsx.run.kernels): run, estimate, sweep."""
    for option in reversed(_KERNEL_OPTIONS):
        f = option(f)
    return f


def long_context_options(f):
    """--loss, --sequence-parallel, --loss-tile-tokens, --act-ckpt-offload, --tiled-mlp (dsx.run.loss,
    dsx.run.sequence, dsx.run.memory_savers): run, estimate, sweep."""
    for option in reversed(_LONG_CONTEXT_OPTIONS):
        f = option(f)
    return f


_DATA_OPTIONS = (
    click.option("--data", metavar="synthetic|random|PATH",
                 help="What the model trains on: synthetic (default: a seeded Markov source a model learns in tens of "
                      "steps), random (uniform ids: the loss cannot fall), or your tokens: a flat uint16/uint32 file "
                      "(nanoGPT's .bin) or a datasets folder (save_to_disk) with input_ids."),
    click.option("--data-dtype", type=click.Choice(["uint16", "uint32"]),
                 help="The ids' width in a --data token file (default: uint16 when the vocabulary fits, else uint32)."),
    click.option("--data-seed", type=int, help="Seed of the synthetic and random sources (default 1234)."),
)


def data_options(f):
    """--data, --data-dtype, --data-seed (dsx.data): run, sweep, check."""
    for option in reversed(_DATA_OPTIONS):
        f = option(f)
    return f
