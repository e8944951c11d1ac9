"""How a rank builds its model: on its GPU (ZeRO 0-2) or partitioned as it is made (ZeRO-3), and the optional
torch.utils.flop_counter check of the analytic FLOP count."""

from __future__ import annotations

from dsx.config_facts import zero_stage
from dsx.rank.faults import one_line
from dsx.rank.protocol import FlopCheck, RankPlan, RankReport


def attention(plan: RankPlan, resolved, report: RankReport, device=None, ds_config: dict | None = None) -> str:
    """The attn_implementation the rank builds with: --attn's, or dsx's block-sparse attention (registered here).
    Compiled with FlexAttention, its masks are built here, on `device`, so the attention joins the model's graph.
    The row says which FlexAttention tiles a CUDA rank uses (dsx.sparse.attention.TUNED_TILES or inductor's)."""
    if plan.sparse_attention is None:
        return plan.toggles.attn
    from dsx.sparse.attention import activate, from_plan

    sparse = from_plan(plan.sparse_attention, resolved.num_heads, resolved.seq_len)
    if plan.sequence_parallel:  # DeepSpeed's groups are consecutive ranks; the all-to-all hands rank r head slice r
        import torch

        sparse = sparse.heads_of(torch.distributed.get_rank() % plan.sequence_parallel, plan.sequence_parallel)
    attn = activate(sparse)
    report.notes.append(f"the ranks built the model with attn_implementation {attn} "
                        f"({plan.sparse_attention.block['mode']} layout, kernel {plan.sparse_attention.kernel})")
    if plan.sequence_parallel:
        report.notes.append(f"sparse attention under Ulysses: each rank's layout is its "
                            f"{resolved.num_heads // plan.sequence_parallel} heads' over the whole sequence")
    if plan.toggles.compile and sparse.kernel == "flex" and device is not None:
        sparse.prepare(resolved.seq_len, device)
        report.notes.append("FlexAttention runs inside the compiled graph (its BlockMasks built before compiling)")
    if sparse.kernel == "flex" and device is not None and ds_config is not None:
        from dsx.config_facts import precision_of
        from dsx.sparse.attention import tiles_note

        dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(precision_of(ds_config), "float32")
        report.notes.append(tiles_note(device, dtype, resolved.head_dim))
    return attn


def build(plan: RankPlan, resolved, ds_config: dict, report: RankReport, device):
    """The model, on this rank's GPU (ZeRO 0-2: initialising 1.5B parameters there takes a second, on the CPU
    about 25 s) or partitioned as it is made (ZeRO-3)."""
    from dsx.models import assume_unpacked_batches, build_model

    attn = attention(plan, resolved, report, device, ds_config)
    if assume_unpacked_batches() and plan.toggles.compile and resolved.task == "causal-lm":
        report.notes.append("compiled with the plain causal mask (dsx.models.assume_unpacked_batches: a rank's batches "
                            "are one whole sequence per row), not transformers' full [B, 1, S, S] one")
    if zero_stage(ds_config) != 3:
        return build_initialised(resolved, attn, device)
    import deepspeed

    # What transformers itself does for from_config under ZeRO-3 (modeling_utils._from_config): skip the normal
    # weight init, partition parameters as modules are created, then initialise each module's weights with its
    # parameters gathered (initialising empty shards breaks e.g. an embedding's padding row).
    try:
        from transformers.initialization import no_init_weights
        from transformers.integrations.deepspeed import initialize_weights_zero3
    except ImportError:
        no_init_weights = initialize_weights_zero3 = None
    if no_init_weights is not None:
        with no_init_weights(), deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = build_model(resolved, attn=attn)
        initialize_weights_zero3(model)
        model.tie_weights()
        report.notes.append("ZeRO-3: model built under deepspeed.zero.Init, weights initialised with "
                            "transformers' initialize_weights_zero3")
    else:
        with deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = build_model(resolved, attn=attn)
        report.notes.append("ZeRO-3: model built under deepspeed.zero.Init")
    if not any(hasattr(p, "ds_id") for p in model.parameters()):
        raise RuntimeError("ZeRO-3: the model's parameters were not partitioned by deepspeed.zero.Init")
    return model


def build_initialised(resolved, attn: str, device):
    """The model with its weights initialised as the ZeRO-3 path below does it: made under transformers'
    no_init_weights (no initialisation while the modules are created), then initialize_weights, module by module in
    the same order. So the same seed gives the same initial weights at every ZeRO stage (a plain from_config first
    initialises each nn.Linear as it is made, which draws other numbers), which dsx.parity relies on."""
    from dsx.models import build_model

    try:
        from transformers.initialization import guard_torch_init_functions, no_init_weights
    except ImportError:  # transformers before 5: its ZeRO-3 path has no initialize_weights_zero3 either
        return build_model(resolved, attn=attn, device=device)
    import torch

    with no_init_weights():
        model = build_model(resolved, attn=attn, device=device)
    with torch.no_grad(), guard_torch_init_functions():
        model.initialize_weights()
    model.tie_weights()
    return model


def flop_check(plan: RankPlan, resolved, device, report: RankReport) -> None:
    """torch.utils.flop_counter count of a forward+backward on plain copies of the model (rank 0 only, before
    deepspeed.initialize). dsx.flops.flop_counter_flops_per_token counts a 1-layer and a 2-layer build of the
    same width on this rank's device and extrapolates in depth (exact: the layers are identical), so the check
    needs a fraction of the model's memory; models of <= 2 layers are counted whole."""
    from dsx.flops import flop_counter_flops_per_token

    attn = plan.toggles.attn
    micro = plan.micro_batch
    try:
        per_token = float(flop_counter_flops_per_token(resolved, device=device, attn=attn, micro_batch=micro))
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
        report.flop_check = FlopCheck(counter_flops_per_token=per_token, device=str(device), attn=attn,
                                      micro_batch=micro)
    except Exception as exc:
        report.flop_check = FlopCheck(counter_flops_per_token=None, error=one_line(exc))
