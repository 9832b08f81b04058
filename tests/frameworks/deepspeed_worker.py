"""A tiny DeepSpeed job (ZeRO-1 data parallel, CPU, gloo): what a tenant's DeepSpeed image
runs, started by tests/frameworks/smoke_deepspeed.py with the JobSet's own command. Prints
one line per rank: the rendezvous it found, its loss over its data before and after, and
whether every rank ends with the same parameters."""

import os

import deepspeed
import torch

deepspeed.init_distributed(dist_backend="gloo")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
config = {"train_batch_size": 8 * world, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
          "zero_optimization": {"stage": 1}}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
inputs = torch.randn(64, 16, generator=torch.Generator().manual_seed(rank))  # each rank its own data
targets = inputs.sum(dim=1, keepdim=True)


def whole_loss() -> float:
    with torch.no_grad():
        return torch.nn.functional.mse_loss(engine.module(inputs), targets).item()


first = whole_loss()
for step in range(20):
    for micro in range(2):
        at = (step * 2 + micro) % 16 * 4
        loss = torch.nn.functional.mse_loss(engine(inputs[at:at + 4]), targets[at:at + 4])
        engine.backward(loss)
        engine.step()
flat = torch.cat([p.detach().flatten() for p in engine.module.parameters()])
gathered = [torch.zeros_like(flat) for _ in range(world)]
torch.distributed.all_gather(gathered, flat)
same = all(torch.equal(gathered[0], other) for other in gathered)
print(f"rank={rank} world={world} master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
      f"first_loss={first:.4f} last_loss={whole_loss():.4f} same_params={same} steps={engine.global_steps}", flush=True)
