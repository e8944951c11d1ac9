"""Can DeepSpeed 0.18.9's 1-bit optimizers run on CPU ranks (gloo)? One real attempt per optimizer and backend.

    dsx launch --python LANE --gpus 2 --config CONFIG --config-arg --deepspeed_config -- python bench/onebit/cpu_attempt.py

Trains a 2-layer MLP for 4 steps (freeze_step 2, so the compressed phase would start) and prints one line: the
optimizer, the backend and 'ok' with the phase reached, or the exception that stopped it (bench/onebit/cpu_attempt.md
has what it printed).
"""

import argparse
import json

import deepspeed
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--deepspeed_config")
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
config = json.load(open(args.deepspeed_config))
optimizer = config["optimizer"]
label = f"{optimizer['type']} comm_backend_name={optimizer['params'].get('comm_backend_name')}"
deepspeed.init_distributed()
rank = torch.distributed.get_rank()
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
try:
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    for step in range(4):
        x = torch.randn(4, 64)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
    outcome = f"ok: 4 steps, engine all-reduce {'on' if engine.enable_backward_allreduce else 'off (compressed phase)'}"
except BaseException as exc:  # noqa: BLE001 - the outcome is what this script reports
    outcome = f"FAILED in {'initialize' if 'engine' not in dir() else 'training'}: {type(exc).__name__}: {exc}"
if rank == 0:
    print(f"RESULT deepspeed {deepspeed.__version__}, {label}: {outcome.splitlines()[0][:300]}", flush=True)
