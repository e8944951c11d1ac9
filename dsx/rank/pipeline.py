"""The rank side of `dsx run --pipeline-stages N`: a transformers causal LM as a `deepspeed.pipe.PipelineModule`,
initialised by DeepSpeed's PipelineEngine and stepped with `engine.train_batch`.

The pipeline is made of the HF model's own modules (built first, with the run's seed, then cut into pieces), so
it computes the function the unsplit model computes:

    [TokenEmbeddingPipe]  input_ids -> (embeddings, position_ids)           tied with the head when the HF model ties
    [GPT2PositionsPipe]   GPT-2 only: + wpe(position_ids), dropout
    [GPT2BlockPipe | LlamaDecoderLayerPipe] x layers   (hidden, position_ids) -> (hidden, position_ids)
    [FinalNormPipe]       (hidden, position_ids) -> hidden
    [TokenEmbeddingPipe as head | LMHeadPipe]  hidden -> logits; loss: the HF model's own loss_function

What travels between stages is (hidden states, int64 position ids): the one float tensor reaches the loss (the
engine asserts a gradient for every float input it received), position ids are integers (no gradient is sent for
them), and nothing is None. Masks and RoPE cos/sin are not passed: each block recomputes them from the position
ids with transformers' own create_causal_mask / rotary embedding, once per stage and micro-batch (StageInputs);
with sdpa and no padding the mask is None and the attention runs causally, as in the unsplit model.

A tied input embedding / LM head (GPT-2, Llama-3.2) stays tied: both ends are a `TiedLayerSpec` of one key, built on
the first and the last stage, broadcast from the lowest rank at start and their gradients all-reduced by DeepSpeed.

With more than one stage the HF model is built on the CPU (the whole model, for the same weights as the unsplit one);
the PipelineModule moves only this stage's layers to the device, and the other stages' modules are released.
"""

from __future__ import annotations

import hashlib
import time

import torch
from torch import nn

from dsx.pipeline import (BLOCK_LAYER, EMBEDDING_LAYER, GPT2_POSITIONS_LAYER, HEAD_LAYER, NORM_LAYER, TIED_KEY,
                          hf_pieces)
from dsx.rank.model import attention
from dsx.rank.protocol import PipelineRankInfo, RankPlan, RankReport


class StageInputs:
    """What every block of one stage derives from the position ids of the micro-batch it runs: the attention mask
    (transformers.masking_utils.create_causal_mask, as the HF model builds it) and Llama's RoPE cos/sin. Computed
    by the first block that needs them and reused by the others while the same position-id tensor comes through
    (each micro-batch brings a new one; a checkpointed block's recomputation gets a detached copy and recomputes)."""

    def __init__(self, config, rotary: nn.Module | None = None):
        self.config = config
        self.rotary = rotary  # a plain attribute, not a submodule: blocks register it themselves
        self._mask_key: tuple | None = None
        self._mask = None
        self._rope_key: tuple | None = None
        self._rope = None

    def mask(self, hidden: torch.Tensor, position_ids: torch.Tensor):
        key = (position_ids, hidden.dtype, hidden.shape[0], hidden.device)
        if self._mask_key is None or not _same(self._mask_key, key):
            from transformers.masking_utils import create_causal_mask

            # positional: (config, inputs_embeds, attention_mask, cache, position_ids); transformers 5.17 (the GPU
            # hosts) names the cache past_key_values, 5.24 cache
            self._mask = create_causal_mask(self.config, hidden, None, None, position_ids)
            self._mask_key = key
        return self._mask

    def rope(self, hidden: torch.Tensor, position_ids: torch.Tensor):
        key = (position_ids, hidden.dtype, hidden.shape[0], hidden.device)
        if self._rope_key is None or not _same(self._rope_key, key):
            self._rope = self.rotary(hidden, position_ids=position_ids)
            self._rope_key = key
        return self._rope


def _same(a: tuple, b: tuple) -> bool:
    return a[0] is b[0] and a[1:] == b[1:]


class TokenEmbeddingPipe(nn.Module):
    """input_ids -> (token embeddings, position ids 0..seq-1 as the HF model makes them when none are given)."""

    def __init__(self, modules: dict, key: str):
        super().__init__()
        self.embed = modules[key]

    def forward(self, input_ids):
        embeds = self.embed(input_ids)
        position_ids = torch.arange(input_ids.shape[-1], device=input_ids.device).unsqueeze(0)
        return embeds, position_ids


def tied_head_forward(module: TokenEmbeddingPipe, hidden):
    """The LM head of a tied model: hidden @ embedding.T, what the HF lm_head (bias-free, weight = the embedding)
    computes."""
    return nn.functional.linear(hidden, module.embed.weight)


class GPT2PositionsPipe(nn.Module):
    """GPT-2's learned positions and embedding dropout: drop(embeddings + wpe(position_ids))."""

    def __init__(self, modules: dict):
        super().__init__()
        self.wpe = modules["wpe"]
        self.drop = modules["drop"]

    def forward(self, inputs):
        embeds, position_ids = inputs
        return self.drop(embeds + self.wpe(position_ids).to(embeds.device)), position_ids


class GPT2BlockPipe(nn.Module):
    """One GPT2Block, called as GPT2Model.forward calls it."""

    def __init__(self, modules: dict, index: int, stage_inputs: StageInputs):
        super().__init__()
        self.block = modules[f"block{index}"]
        self.stage_inputs = stage_inputs

    def forward(self, inputs):
        hidden, position_ids = inputs
        mask = self.stage_inputs.mask(hidden, position_ids)
        hidden = self.block(hidden, None, mask, None, encoder_attention_mask=None, use_cache=False,
                            position_ids=position_ids)
        return hidden, position_ids


class LlamaDecoderLayerPipe(nn.Module):
    """One LlamaDecoderLayer, called as LlamaModel.forward calls it (RoPE recomputed on this stage)."""

    def __init__(self, modules: dict, index: int, stage_inputs: StageInputs):
        super().__init__()
        self.layer = modules[f"block{index}"]
        self.rotary = stage_inputs.rotary  # registered here so its inv_freq buffer moves to the device
        self.stage_inputs = stage_inputs

    def forward(self, inputs):
        hidden, position_ids = inputs
        mask = self.stage_inputs.mask(hidden, position_ids)
        cos_sin = self.stage_inputs.rope(hidden, position_ids)
        hidden = self.layer(hidden, attention_mask=mask, position_embeddings=cos_sin, position_ids=position_ids,
                            use_cache=False)
        return hidden, position_ids


class FinalNormPipe(nn.Module):
    def __init__(self, modules: dict):
        super().__init__()
        self.norm = modules["norm"]

    def forward(self, inputs):
        hidden, _ = inputs
        return self.norm(hidden)


class LMHeadPipe(nn.Module):
    """An untied LM head (Llama-2 layout)."""

    def __init__(self, modules: dict):
        super().__init__()
        self.lm_head = modules["lm_head"]

    def forward(self, hidden):
        return self.lm_head(hidden)


class CausalLMLoss:
    """The HF model's own loss (transformers' ForCausalLMLoss: shift, fp32 upcast, mean cross-entropy)."""

    def __init__(self, loss_function, vocab_size: int):
        self.loss_function = loss_function
        self.vocab_size = vocab_size
        self.__name__ = "CausalLMLoss"

    def __call__(self, logits, labels):
        return self.loss_function(logits, labels, vocab_size=self.vocab_size)


_CLASSES = {EMBEDDING_LAYER: TokenEmbeddingPipe, GPT2_POSITIONS_LAYER: GPT2PositionsPipe, NORM_LAYER: FinalNormPipe,
            HEAD_LAYER: LMHeadPipe, BLOCK_LAYER["gpt2"]: GPT2BlockPipe, BLOCK_LAYER["llama"]: LlamaDecoderLayerPipe}


class _Modules(dict):
    """The HF model's modules by role, as the layer specs hold them (a short repr: DeepSpeed prints the specs)."""

    def __repr__(self) -> str:
        return "<hf modules>"


def layer_specs(model: nn.Module, family: str, modules_out: dict | None = None) -> list:
    """The PipelineModule's layers for an HF causal LM, as (Tied)LayerSpecs over the model's own modules.

    The specs take their module from a dict (`modules_out`, filled here): once the PipelineModule is built, clearing
    it releases the layers of the other stages (a spec would otherwise keep them alive)."""
    from deepspeed.pipe import LayerSpec, TiedLayerSpec

    modules, tied, config = hf_pieces(model, family)
    modules_out = _Modules() if modules_out is None else modules_out
    modules_out.update(modules)
    stage_inputs = StageInputs(config, modules.get("rotary"))
    embedding = (TiedLayerSpec(TIED_KEY, TokenEmbeddingPipe, modules_out, "embed", tied_weight_attr=["embed.weight"])
                 if tied else LayerSpec(TokenEmbeddingPipe, modules_out, "embed"))
    specs = [embedding]
    if family == "gpt2":
        specs.append(LayerSpec(GPT2PositionsPipe, modules_out))
    block_class = _CLASSES[BLOCK_LAYER[family]]
    # Blocks share one StageInputs: the ones that end up on the same stage compute the mask / RoPE once per
    # micro-batch (each stage is its own process, so stages never share it).
    specs += [LayerSpec(block_class, modules_out, i, stage_inputs) for i in range(config.num_hidden_layers)]
    specs.append(LayerSpec(FinalNormPipe, modules_out))
    specs.append(TiedLayerSpec(TIED_KEY, TokenEmbeddingPipe, modules_out, "embed", forward_fn=tied_head_forward,
                               tied_weight_attr=["embed.weight"]) if tied else LayerSpec(LMHeadPipe, modules_out))
    return specs


def build_pipeline_module(plan: RankPlan, resolved, device, report: RankReport):
    """The PipelineModule of this rank's stage; the HF model is built with the run's seed (set by the caller)."""
    from deepspeed.pipe import PipelineModule

    from dsx.rank.model import build_initialised

    pipe = plan.pipeline
    # One stage holds everything: build it on the device at once (like the plain path). More stages: on the CPU,
    # and only this stage's layers move to the device (so on GPUs its initial weights are drawn by the CPU's
    # generator, not the GPU's: other numbers than the plain path's).
    model = build_initialised(resolved, attention(plan, resolved, report), device if pipe.stages == 1 else "cpu")
    loss = CausalLMLoss(model.loss_function, resolved.vocab_size)
    modules = _Modules()
    specs = layer_specs(model, resolved.family, modules)
    del model
    module = PipelineModule(layers=specs, num_stages=pipe.stages, loss_fn=loss, partition_method=pipe.partition,
                            activation_checkpoint_interval=pipe.activation_checkpoint_interval,
                            checkpointable_layers=[BLOCK_LAYER[resolved.family]])
    modules.clear()  # the other stages' layers are garbage now
    return module


class PipelineTrainer:
    """A PipelineEngine and its optimizer step: engine.train_batch over the step's micro-batches."""

    def __init__(self, engine, report: RankReport):
        self.engine = engine
        self.report = report

    def data_parallel(self) -> tuple[int, int]:
        """(this rank's replica, replicas): a replica is a whole pipeline; its stages read the same batches."""
        grid = self.engine.grid
        return grid.data_parallel_id, grid.data_parallel_size

    def step_loss(self, losses: list) -> float:
        """The engine's loss: already the mean over the step's micro-batches and the replicas."""
        return float(losses[0].float().item())

    def step(self, batches: list[dict]) -> list:
        """One optimizer step over grad_accum micro-batches: the first stage reads the inputs, the last the labels
        (both iterate the same ((input_ids), labels) sequence). Returns [the step's mean loss], which the engine
        computes on the last stage, averages over the data-parallel replicas and broadcasts to every stage."""
        return [self.engine.train_batch(iter([(b["input_ids"], b["labels"]) for b in batches]))]

    def finish(self) -> None:
        """After the timed steps: a fingerprint (sha256 of the bytes) of each tied weight this rank holds, so dsx can
        check that the first and the last stage still hold the same embedding."""
        started = time.time()
        module, fingerprints = self.engine.module, {}
        for key, tied in module.tied_modules.items():
            for attr in module.tied_weight_attrs[key]:
                weight = tied
                for part in attr.split("."):
                    weight = getattr(weight, part)
                fingerprints[f"{key}.{attr}"] = hashlib.sha256(
                    weight.detach().float().cpu().numpy().tobytes()).hexdigest()
        self.report.pipeline.tied_fingerprints = fingerprints
        self.report.pipeline.fingerprint_s = time.time() - started


def initialize(plan: RankPlan, resolved, ds_config: dict, report: RankReport, device, progress) -> PipelineTrainer:
    """Build this stage and deepspeed.initialize it (DeepSpeed makes a PipelineEngine of a PipelineModule)."""
    import deepspeed

    module = build_pipeline_module(plan, resolved, device, report)
    progress.phase("model_built")  # report.params_seen stays None: a stage holds part of the model (report.pipeline)
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=[p for p in module.parameters()
                                                                           if p.requires_grad], config=ds_config)
    if plan.toggles.compile:
        engine.compile()
    report.pipeline = stage_info(engine, module)
    progress.phase("initialized")
    return PipelineTrainer(engine, report)


def stage_info(engine, module) -> PipelineRankInfo:
    """Which stage this rank runs, its layers and parameters, and the partition every rank agreed on."""
    names = []
    for f in module.forward_funcs:
        target = getattr(f, "func", f)  # a tied head is a functools.partial(forward_fn, module)
        names.append("tied head" if target is tied_head_forward else type(f).__name__)
    tied = sum(p.numel() for m in module.tied_modules.values() for p in m.parameters())
    return PipelineRankInfo(
        stage=engine.stage_id, stages=engine.num_stages, data_parallel_rank=engine.grid.data_parallel_id,
        data_parallel_size=engine.grid.data_parallel_size, parts=[int(x) for x in module.parts], layers=names,
        params=sum(p.numel() for p in module.parameters()), tied_params=tied)
