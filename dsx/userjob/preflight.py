"""What `dsx launch` checks before it starts a user's script: the config, linted for the launch's world size with the
fill rules of the transformers Trainer / accelerate when they fill it (--hf), and a Trainer launch's warmup."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from dsx.lint.findings import Finding
from dsx.userjob.trainer import TRAINER_CONFIG_ARG, flag_on, installed_transformers, warmup_finding

COMMAND_LINE = "(the script's arguments)"
"""The path of a finding about the command line rather than a key of the config."""


def script_and_args(command: list[str]) -> tuple[str, list[str]]:
    """(the script's file name or the module, the arguments it gets); ('', []) when the command is not one dsx
    launch can run (build_launch says why later)."""
    from dsx.launcher import LaunchError, user_rank_command

    try:
        rank_command, _ = user_rank_command(command)
    except LaunchError:
        return "", []
    return Path(rank_command[0]).name, rank_command[1:]


def check_script(command: list[str], *, local: bool = True) -> None:
    """RunRefused when `python SCRIPT.py` names no file here: found before the launch spends seconds starting ranks
    and records an error row. A multi-node launch (local=False) may run a script only its nodes have: not checked."""
    from dsx.launcher import LaunchError, user_rank_command
    from dsx.run.refused import RunRefused

    try:
        rank_command, runner_flags = user_rank_command(command)
    except LaunchError:
        return  # build_launch says why
    if not local or runner_flags or not rank_command:  # a module (-m) or a program on PATH: the runner finds it
        return
    script = Path(rank_command[0])
    if not script.exists():
        raise RunRefused(f"{script}: no such file (the script after --)")
    if not script.is_file():
        raise RunRefused(f"{script}: is not a file (the script after --)")


ACCELERATE_CONFIG_ARG = "accelerate"
"""--config-arg's word for an accelerate script: the config goes into the environment `accelerate launch` gives it."""


def config_delivery(config_arg: str, config_path: str) -> tuple[list[str], dict[str, str]]:
    """How the config reaches the script: (arguments appended to its command line, variables set in every rank's
    environment). `accelerate launch` passes a DeepSpeed plugin's config file to the script's Accelerator() as
    ACCELERATE_USE_DEEPSPEED / ACCELERATE_DEEPSPEED_CONFIG_FILE (accelerate.utils.launch); dsx launch does the same,
    so the script runs as it does under accelerate."""
    path = os.path.abspath(config_path)
    if config_arg.lower() == "none":
        return [], {}
    if is_accelerate(config_arg):
        return [], {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": path}
    return [config_arg, path], {}


def is_accelerate(config_arg: str) -> bool:
    """The config goes to an accelerate script (which, as under `accelerate launch`, gets no --local_rank)."""
    return config_arg.lower() == ACCELERATE_CONFIG_ARG


def filled_by_hf(config_arg: str) -> bool:
    """The config goes to a client that fills "auto" (the Trainer's --deepspeed, accelerate's environment)."""
    return config_arg == TRAINER_CONFIG_ARG or is_accelerate(config_arg)


def is_trainer_launch(config_arg: str, args: list[str]) -> bool:
    """The config goes to the transformers Trainer: through its own flag --deepspeed, by --config-arg or by hand."""
    return config_arg == TRAINER_CONFIG_ARG or any(a == TRAINER_CONFIG_ARG or a.startswith(TRAINER_CONFIG_ARG + "=")
                                                  for a in args)


@dataclass
class Checked:
    findings: list[Finding] = field(default_factory=list)
    hf_only: list[Finding] = field(default_factory=list)
    """Errors --hf would clear: "auto" values the transformers Trainer / accelerate fill (without --hf only)."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != "error"]

    def error_lines(self) -> list[str]:
        """Every error, the ones --hf would clear folded into one line that says so."""
        lines = ["  " + f.render() for f in self.errors if f not in self.hf_only]
        if self.hf_only:
            paths = ", ".join(f.path for f in self.hf_only)
            lines.append(f"  {len(self.hf_only)} \"auto\" value(s) only the transformers Trainer / accelerate fill "
                         f"({paths}): if the script is one, launch with --hf (implied by --config-arg --deepspeed or "
                         "accelerate)")
        return lines


def cpu_world_finding(device: str, world_size: int, args: list[str]) -> Finding | None:
    """A Trainer on several CPU ranks without --use_cpu: accelerate takes the DeepSpeed path only with a GPU, so
    each rank sees a world of 1, fills train_batch_size for it, and deepspeed.initialize asserts (seen with
    transformers 5.24 and accelerate 1.15)."""
    if device != "cpu" or world_size < 2 or flag_on(args, "use_cpu"):
        return None
    return Finding(COMMAND_LINE, "error", "trainer-cpu-ranks",
                   f"the transformers Trainer on {world_size} CPU ranks needs --use_cpu: without it accelerate sees "
                   "no distributed job (its DeepSpeed path wants a GPU), every rank fills train_batch_size for a world "
                   "of 1, and deepspeed.initialize asserts \"train_batch_size is not equal to micro_batch_per_gpu * "
                   "gradient_acc_step * world_size\"",
                   "add --use_cpu to the script's arguments")


def zero3_init_on_cpu_finding(data: dict, device: str, world_size: int) -> Finding | None:
    """A Trainer at ZeRO-3 on several CPU ranks: with --use_cpu accelerate starts torch.distributed itself, not
    deepspeed.comm, so a model built under deepspeed.zero.Init (from_config / from_pretrained at ZeRO-3) has its
    DeepSpeedConfig parsed for a world of 1 and asserts on the Trainer's batch size (reproduced: transformers 5.24,
    accelerate 1.15, DeepSpeed 0.19.8, 2 CPU ranks). dsx cannot see how the script builds its model: a warning."""
    zero = data.get("zero_optimization")
    if device != "cpu" or world_size < 2 or not isinstance(zero, dict) or zero.get("stage") != 3:
        return None
    return Finding("zero_optimization.stage", "warning", "trainer-cpu-zero3-init",
                   f"ZeRO-3 on {world_size} CPU ranks: a model the script builds under deepspeed.zero.Init "
                   "(from_config / from_pretrained, as run_clm.py does) fails with \"train_batch_size is not equal to "
                   "micro_batch_per_gpu * gradient_acc_step * world_size\": on CPU ranks accelerate starts "
                   "torch.distributed itself, so zero.Init reads the config for a world of 1 (not on GPUs)",
                   "build the model directly (e.g. GPT2LMHeadModel(config)), or call deepspeed.init_distributed() "
                   "before building it")


def accelerate_cpu_world_finding(device: str, world_size: int) -> Finding | None:
    """An accelerate script on several CPU ranks: without a GPU accelerate's DeepSpeed path counts one process
    (AcceleratorState: no backend -> num_processes 1), so every rank trains on all the data as the main process while
    DeepSpeed's engine spans the world (seen with accelerate 1.15: 2 ranks each wrote its results as rank 0's)."""
    if device != "cpu" or world_size < 2:
        return None
    return Finding(COMMAND_LINE, "error", "accelerate-cpu-ranks",
                   f"an accelerate script on {world_size} CPU ranks: without a GPU accelerate's DeepSpeed path counts "
                   "one process, so every rank would train on all the data as the main process",
                   "launch 1 CPU rank (--gpus 1), or run on GPUs")


def check(data: dict, *, duplicate_keys, target, world_size: int, hf: bool, trainer: bool, args: list[str],
          device: str = "cuda", transformers_version: str | None = None, accelerate: bool = False) -> Checked:
    """The findings that decide a launch: lint at the world size (with the Trainer / accelerate fill rules under
    --hf); for a Trainer launch the warmup verdict for these script arguments and this transformers replaces the
    lint's general hf-zero-warmup warning, CPU ranks need --use_cpu and ZeRO-3 there is warned about zero.Init; an
    accelerate script (--config-arg accelerate) is refused on several CPU ranks."""
    from dsx.lint.engine import lint

    findings = lint(data, target=target, world_size=world_size, hf=hf, duplicate_keys=duplicate_keys)
    if trainer:
        version = transformers_version if transformers_version is not None else installed_transformers()
        verdict = warmup_finding(data, args, version, target)
        findings = [f for f in findings if f.code != "hf-zero-warmup"] + ([verdict] if verdict else [])
        findings += [f for f in [cpu_world_finding(device, world_size, args),
                                 zero3_init_on_cpu_finding(data, device, world_size)] if f]
    if accelerate:
        findings += [f for f in [accelerate_cpu_world_finding(device, world_size)] if f]
    checked = Checked(findings)
    if not hf and checked.errors:
        with_hf = {(f.path, f.code) for f in lint(data, target=target, world_size=world_size, hf=True,
                                                  duplicate_keys=duplicate_keys) if f.severity == "error"}
        checked.hf_only = [f for f in checked.errors if (f.path, f.code) not in with_hf]
    return checked
