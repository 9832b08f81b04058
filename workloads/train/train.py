"""The training loop. Launched by torchrun (c10d rendezvous, elastic node counts):

    torchrun --nnodes=1:4 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29400 \
        -m workloads.train --data /fsx/tokens --checkpoint-dir /fsx/ckpt/run1 --precision bf16

Without torchrun it runs as one process with no process group. A restarted or resized job
resumes from the latest complete checkpoint under --checkpoint-dir and continues exactly:
same data order, same optimizer and scheduler state, same random streams.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from workloads.train import checkpoint as ckpt
from workloads.train import dataset_version
from workloads.train.data import ShardError, ShardedTokens, generate_synthetic_shards, micro_batch_start
from workloads.train.metrics import MetricsWriter, model_flops_utilisation, resolve_peak_tflops
from workloads.train import parallel as par
from workloads.train.model import GPT, GPTConfig
from workloads.train.options import EXIT_BAD_INPUT, build_parser
from workloads.train.shapes import PRESETS, Layout, LayoutError, check_layout
from workloads.tracking.client import TrackingError
from workloads.tracking.store import StoreError

# Exit code of --stop-after-step: a run that stops there behaves like one killed by the
# scheduler (no cleanup, no final checkpoint), which is what the resume tests need.
SIMULATED_CRASH_EXIT = 86


# Optimizer states keyed by parameter name, flat: the parts (pipeline stages) of a model
# merge into one dict, and a checkpoint loads into any layout that has the same names.
STATE_DICT_OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


class ResumeRefused(Exception):
    """The checkpoint was made on other data or another model: one line saying which."""

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # options.PRECISION_NAMES

@dataclass(frozen=True)
class Runtime:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    distributed: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_runtime(device_flag: str) -> Runtime:
    """Join the process group torchrun describes in the environment; NCCL on GPUs, gloo on CPU."""
    use_cuda = device_flag == "cuda" or (device_flag == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls (outside autocast) on tensor cores
        torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", device_id=device if use_cuda else None)
        return Runtime(dist.get_rank(), local_rank, dist.get_world_size(), device, True)
    return Runtime(0, 0, 1, device, False)


def lr_schedule(warmup_steps: int, max_steps: int, min_ratio: float) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to `min_ratio` at `max_steps`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def make_optimizer(model: torch.nn.Module, args: argparse.Namespace, fused: bool) -> torch.optim.AdamW:
    """AdamW for one model part; weight decay on matrices only (not on biases or LayerNorm
    gains: nothing 1-D)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=fused or None)


def model_config(args: argparse.Namespace) -> GPTConfig:
    overrides: dict[str, Any] = {"dropout": args.dropout}
    for name in ("vocab_size", "n_layer", "n_head", "n_embd", "block_size"):
        if getattr(args, name):
            overrides[name] = getattr(args, name)
    try:
        config = PRESETS[args.model](**overrides)
    except ValueError as err:
        raise LayoutError(f"--model {args.model}: {err}") from None
    if args.seq_len and args.seq_len > config.block_size:
        raise LayoutError(f"--seq-len {args.seq_len} is above the model's block size {config.block_size}")
    return config


def layout_of(args: argparse.Namespace) -> Layout:
    return Layout(tp=args.tp, pp=args.pp, dp_replicate=args.dp_replicate, pp_schedule=args.pp_schedule)


def plan_accumulation(args: argparse.Namespace, world_size: int) -> int:
    """Micro-batches per optimizer step on this world size: from --global-batch when given
    (so a resized job keeps its batch), else --grad-accum. Raises LayoutError."""
    config, layout = model_config(args), layout_of(args)
    check_layout(layout, world_size, config, args.strategy, args.precision)
    seq_len = args.seq_len or config.block_size
    if layout.tp > 1 and seq_len % layout.tp:
        raise LayoutError(f"--seq-len {seq_len} does not divide by tp {layout.tp}: sequence parallelism "
                          "splits each sequence evenly")
    grad_accum = args.grad_accum
    if args.global_batch:
        per_pass = args.micro_batch * layout.dp(world_size)
        if args.global_batch % per_pass:
            raise LayoutError(f"--global-batch {args.global_batch} is not a multiple of micro-batch x data-parallel "
                              f"ranks ({args.micro_batch} x {layout.dp(world_size)}) at world size {world_size}; "
                              f"use a multiple of {per_pass}")
        grad_accum = args.global_batch // per_pass
    check_layout(layout, world_size, config, args.strategy, args.precision, micro_batches=grad_accum)
    return grad_accum


@contextmanager
def gradient_sync(module: torch.nn.Module, model: torch.nn.Module, sync: bool) -> Iterator[None]:
    """Skip the gradient all-reduce / reduce-scatter on all but the last micro-batch."""
    ddp = getattr(module, "_orig_mod", module)
    if isinstance(ddp, DDP) and not sync:
        with ddp.no_sync():
            yield
        return
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(sync)
    yield


def all_rng_states(rt: Runtime) -> bytes:
    """Every rank's generator states, gathered, so the checkpoint (written once, identical
    on all ranks) restores each rank's own stream."""
    mine = ckpt.rng_states()
    states = [None] * rt.world_size
    if rt.distributed:
        dist.all_gather_object(states, mine)
    else:
        states = [mine]
    buffer = io.BytesIO()
    torch.save(states, buffer)
    return buffer.getvalue()


class Trainer:
    def __init__(self, args: argparse.Namespace, rt: Runtime) -> None:
        self.args, self.rt = args, rt
        self.config = model_config(args)
        self.layout = layout_of(args)
        self.seq_len = args.seq_len or self.config.block_size
        self.grad_accum = plan_accumulation(args, rt.world_size)
        self.dtype = PRECISIONS[args.precision]
        self.parallel = par.build(self.config, self.layout, rt.world_size, rt.device, strategy=args.strategy,
                                  dtype=self.dtype, activation_checkpoint=args.activation_checkpoint,
                                  compile_model=args.compile, seed=args.seed, distributed=rt.distributed)
        self.global_batch = args.micro_batch * self.grad_accum * self.parallel.dp_size
        plain = args.strategy == "ddp" and self.layout.tp == 1
        # One optimizer per model part (pipeline stage), as DCP's state-dict helpers expect.
        self.optimizers = [make_optimizer(m, args, fused=rt.device.type == "cuda" and plain)
                           for m in self.parallel.modules]
        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(
            o, lr_schedule(args.warmup_steps, args.max_steps, args.min_lr_ratio)) for o in self.optimizers]
        self.scaler = self._grad_scaler()
        # Compiled with the model: eager, the loss materialises the fp32 logits (3.3 GB for
        # 16 x 1024 tokens of GPT-2's vocabulary) and its softmax, a third of a 124M step on
        # an H100; compiled, the upcast, log-softmax and its backward fuse into few passes.
        self.loss_fn = torch.compile(token_loss) if args.compile else token_loss
        self.pipeline = self._pipeline_schedule() if self.parallel.pipelined else None
        # Dropout masks differ between ranks (tensor-parallel ranks drop on their own sequence
        # shards and heads) but each rank's stream is fixed by the seed, and saved in every
        # checkpoint.
        torch.manual_seed(args.seed + 1 + rt.rank)
        self.step = 0
        self.samples_seen = 0
        self.dataset_id = ""  # the dataset version trained on (run sets it)
        self.run_id = ""  # the MLflow run, kept in checkpoints so a resumed job continues it

    def _grad_scaler(self) -> torch.amp.GradScaler:
        enabled = self.args.precision == "fp16"
        whole = self.args.strategy == "ddp" and self.layout.tp == 1 and not self.parallel.pipelined
        if self.rt.distributed and not whole:
            # Sharded or staged gradients: each rank sees only its part, so inf/NaN is agreed
            # over the ranks. DDP's gradients are all-reduced, equal on every rank, and take
            # the plain scaler: the sharded one's found_inf has shape [1], which the fused
            # AdamW (used with DDP on a GPU) refuses against its 0-d step counters.
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            return ShardedGradScaler(self.rt.device.type, enabled=enabled)
        return torch.amp.GradScaler(self.rt.device.type, enabled=enabled)

    def _pipeline_schedule(self) -> Any:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

        group = self.parallel.mesh["pp"].get_group()
        stages = [PipelineStage(module, index, self.parallel.num_stages, self.rt.device, group=group)
                  for module, index in zip(self.parallel.callables, self.parallel.stage_indices)]
        # Each micro-batch's mean loss; the schedule divides the gradients by their number.
        if self.layout.pp_schedule == "interleaved":
            return ScheduleInterleaved1F1B(stages, n_microbatches=self.grad_accum, loss_fn=token_loss)
        return Schedule1F1B(stages[0], n_microbatches=self.grad_accum, loss_fn=token_loss)

    # --- checkpoints ---------------------------------------------------------------
    def _state_dicts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Model and optimizer states of every part, keyed by the whole model's names. A
        last pipeline stage's own copy of the token embedding keeps its optimizer state
        under the embedding's name, as the unsharded model's tied matrix does."""
        model_sd: dict[str, Any] = {}
        optim_sd: dict[str, Any] = {}
        for module, optimizer in zip(self.parallel.modules, self.optimizers):
            m, o = get_state_dict(module, optimizer, options=STATE_DICT_OPTIONS)
            model_sd.update(m)
            optim_sd.update(_tied_names(module, o, to_checkpoint=True))
        return model_sd, optim_sd

    def state(self) -> dict[str, Any]:
        model_sd, optim_sd = self._state_dicts()
        return {
            "model": model_sd,
            "optim": optim_sd,
            "scheduler": self.schedulers[0].state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": {"step": self.step, "samples_seen": self.samples_seen, "seed": self.args.seed},
            "rng": all_rng_states(self.rt),
        }

    def save(self) -> Path:
        run = {"model": self.config.to_dict(), "world_size": self.rt.world_size, "strategy": self.args.strategy,
               "layout": self.layout.describe(self.rt.world_size), "precision": self.args.precision,
               "seq_len": self.seq_len, "global_batch": self.global_batch, "samples_seen": self.samples_seen,
               "dataset": self.dataset_id, "mlflow_run_id": self.run_id}
        return ckpt.save(self.args.checkpoint_dir, self.step, self.state(), run, keep=self.args.keep_checkpoints)

    def check_resumable(self, path: Path) -> None:
        """Resume only on the data and the model the checkpoint was made with: another
        dataset version silently changes what "exact" resume replays."""
        saved = ckpt.read_config(path)
        if saved.get("dataset") != self.dataset_id:
            raise ResumeRefused(f"cannot resume from {path}: the dataset version differs (checkpoint "
                                f"{saved.get('dataset') or 'unrecorded'}, --data {self.dataset_id}); point --data at "
                                "the checkpoint's dataset or start a new run with --no-resume")
        model = self.config.to_dict()
        changed = sorted(k for k in set(model) | set(saved.get("model", {})) if model.get(k) != saved["model"].get(k))
        if changed:
            what = ", ".join(f"{k} {saved['model'].get(k)} -> {model.get(k)}" for k in changed)
            raise ResumeRefused(f"cannot resume from {path}: the model config differs ({what}); use the "
                                "checkpoint's settings or start a new run with --no-resume")

    def restore(self, path: Path) -> None:
        self.check_resumable(path)
        state = self.state()
        ckpt.load(path, state)
        for module, optimizer in zip(self.parallel.modules, self.optimizers):
            set_state_dict(module, optimizer, model_state_dict=state["model"],
                           optim_state_dict=_tied_names(module, state["optim"], to_checkpoint=False),
                           options=STATE_DICT_OPTIONS)
        for scheduler in self.schedulers:
            scheduler.load_state_dict(state["scheduler"])
        if state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.step = int(state["progress"]["step"])
        self.samples_seen = int(state["progress"]["samples_seen"])
        self.run_id = ckpt.read_config(path).get("mlflow_run_id") or ""
        # Tensors only: a tampered checkpoint cannot run code here.
        states = torch.load(io.BytesIO(state["rng"]), weights_only=True)
        if len(states) == self.rt.world_size:
            ckpt.set_rng_states(states[self.rt.rank])
        else:
            # A resized job: the old ranks' streams don't map onto the new ranks, so start
            # new ones, still fixed by (seed, step, rank).
            torch.manual_seed(self.args.seed + 1 + self.rt.rank + 1_000_003 * self.step)

    # --- one optimizer step ------------------------------------------------------
    def _micro_batch(self, data: ShardedTokens, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This data-parallel rank's micro-batch `micro` of the step (ranks that differ only
        in their tensor or pipeline coordinate read the same samples)."""
        first = micro_batch_start(self.samples_seen, micro, self.parallel.dp_rank, self.args.micro_batch,
                                  self.parallel.dp_size)
        batch = data.batch(first, self.args.micro_batch)
        return batch.inputs.to(self.rt.device, non_blocking=True), batch.targets.to(self.rt.device, non_blocking=True)

    def _autocast(self) -> Any:
        # FSDP2 casts through its MixedPrecisionPolicy instead.
        if self.dtype is None or self.args.strategy == "fsdp":
            return nullcontext()
        return torch.autocast(self.rt.device.type, dtype=self.dtype)

    def _accumulate(self, data: ShardedTokens) -> torch.Tensor:
        """Forward and backward over the step's micro-batches; the summed mean losses."""
        loss_sum = torch.zeros((), device=self.rt.device)
        module, model = self.parallel.callables[0], self.parallel.modules[0]
        for micro in range(self.grad_accum):
            inputs, targets = self._micro_batch(data, micro)
            with gradient_sync(module, model, sync=micro == self.grad_accum - 1):
                with self._autocast():
                    logits = module(inputs)
                loss = self.loss_fn(logits, targets)
                self.scaler.scale(loss / self.grad_accum).backward()
            loss_sum += loss.detach()
        return loss_sum

    def _pipeline(self, data: ShardedTokens) -> torch.Tensor:
        """The step's micro-batches through the pipeline schedule: the first stage takes
        the inputs, the last the targets; the summed mean losses (0 off the last stage)."""
        pairs = [self._micro_batch(data, micro) for micro in range(self.grad_accum)]
        inputs, targets = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
        losses: list[torch.Tensor] = []
        first = 0 in self.parallel.stage_indices
        with self._autocast():
            if self.parallel.has_last_stage:
                self.pipeline.step(*([inputs] if first else []), target=targets, losses=losses)
            else:
                self.pipeline.step(*([inputs] if first else []))
        self._sum_tied_gradients()
        return torch.stack(losses).sum().detach() if losses else torch.zeros((), device=self.rt.device)

    def _sum_tied_gradients(self) -> None:
        """The first stage's token embedding and the last stage's output projection are one
        matrix in the model: each gets the sum of both gradients, so the copies stay equal."""
        if self.parallel.tie_group is None:
            return
        for module in self.parallel.modules:
            tied = module.wte.weight if module.wte is not None else (
                module.lm_head.weight if module.lm_head is not None else None)
            if tied is not None and tied.grad is not None:
                grad = tied.grad.to_local() if hasattr(tied.grad, "to_local") else tied.grad
                dist.all_reduce(grad, group=self.parallel.tie_group)

    def _clip(self) -> torch.Tensor:
        """The global gradient norm (over every shard and every stage), clipped to --grad-clip."""
        grads = [p.grad for p in self.parallel.norm_parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        if hasattr(norm, "full_tensor"):  # DTensor gradients: the norm over their shards
            norm = norm.full_tensor()
        if self.parallel.pipelined:
            squared = norm.pow(2)
            dist.all_reduce(squared, group=self.parallel.mesh["pp"].get_group())
            norm = squared.sqrt()
        if self.args.grad_clip > 0:
            torch.nn.utils.clip_grads_with_norm_(self.parallel.parameters(), self.args.grad_clip, norm)
        return norm

    def train_step(self, data: ShardedTokens) -> tuple[float, float]:
        rt = self.rt
        loss_sum = self._pipeline(data) if self.pipeline is not None else self._accumulate(data)
        for optimizer in self.optimizers:
            self.scaler.unscale_(optimizer)
        grad_norm = self._clip()
        for optimizer in self.optimizers:
            self.scaler.step(optimizer)
        self.scaler.update()
        for optimizer, scheduler in zip(self.optimizers, self.schedulers):
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        self.step += 1
        self.samples_seen += self.global_batch
        loss = loss_sum / self.grad_accum
        if rt.distributed:
            # Every rank of a last stage holds a loss (its data-parallel rank's), other
            # stages 0: sum, then divide by the ranks that hold one (gloo has no AVG).
            dist.all_reduce(loss)
            loss /= rt.world_size // self.layout.pp
        return float(loss), float(grad_norm)


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def _tied_names(module: torch.nn.Module, optim_sd: dict[str, Any], to_checkpoint: bool) -> dict[str, Any]:
    """A last pipeline stage's output projection is the token embedding under another
    name: its optimizer state is saved and loaded under the embedding's name."""
    if getattr(module, "wte", None) is not None or getattr(module, "lm_head", None) is None:
        return optim_sd
    renamed = dict(optim_sd)
    for section in ("state", "param_groups"):  # the flattened state dict's two kinds of key
        own, tied = f"{section}.lm_head.weight.", f"{section}.wte.weight."
        old, new = (own, tied) if to_checkpoint else (tied, own)
        for key in [k for k in renamed if k.startswith(old)]:
            renamed[new + key[len(old):]] = renamed.pop(key)
    return renamed


def prepare_data(args: argparse.Namespace, config: GPTConfig, rt: Runtime) -> None:
    if rt.is_main and args.synthetic_tokens and not any(Path(args.data).glob("*.bin")):
        generate_synthetic_shards(args.data, num_shards=4, tokens_per_shard=args.synthetic_tokens // 4,
                                  vocab_size=config.vocab_size, seed=args.seed)
        version = dataset_version.build(args.data, tokenizer=f"synthetic-markov-{config.vocab_size}",
                                        sources=[f"synthetic:seed={args.seed}"])
        dataset_version.write(version, args.data)
    if rt.distributed:
        dist.barrier()


def open_tracker(args: argparse.Namespace, rt: Runtime) -> Any:
    """Rank 0's MLflow run (None without --tracking-uri). An unreachable server or refused
    credentials stop every rank before the first step, with rank 0's one line."""
    if not args.tracking_uri:
        return None
    from workloads.tracking.client import RunTracker

    tracker, problem = None, [""]
    if rt.is_main:
        try:
            tracker = RunTracker(args.tracking_uri, args.experiment, args.run_name)
        except TrackingError as err:
            problem = [str(err)]
    if rt.distributed:
        dist.broadcast_object_list(problem, src=0)
    if problem[0]:
        raise TrackingError(problem[0])
    return tracker


def start_tracking(tracker: Any, trainer: Trainer, version: dataset_version.DatasetVersion) -> None:
    args = trainer.args
    params = {"model": args.model, **{f"model.{k}": v for k, v in trainer.config.to_dict().items()},
              "strategy": args.strategy, "precision": args.precision, "compile": args.compile,
              "world_size": trainer.rt.world_size, "micro_batch": args.micro_batch, "grad_accum": trainer.grad_accum,
              "global_batch": trainer.global_batch, "seq_len": trainer.seq_len, "lr": args.lr,
              "warmup_steps": args.warmup_steps, "max_steps": args.max_steps, "weight_decay": args.weight_decay,
              "seed": args.seed}
    from workloads.tracking.client import GIT_SHA_TAG, IMAGE_TAG

    tags = {key: os.environ[env] for key, env in ((GIT_SHA_TAG, "MLPLAT_GIT_SHA"), (IMAGE_TAG, "MLPLAT_IMAGE"))
            if os.environ.get(env)}
    resumed = bool(trainer.run_id)
    trainer.run_id = tracker.start(run_id=trainer.run_id or None, params=params, tags=tags)
    if not resumed:
        tracker.log_dataset(version.id, str(Path(args.data).resolve()),
                            {"shards": len(version.shards), "tokens": sum(s.tokens for s in version.shards),
                             "tokenizer": version.tokenizer, "samples": version.samples(trainer.seq_len)})


def upload_checkpoint(args: argparse.Namespace, trainer: Trainer, path: Path, tracker: Any) -> str:
    from workloads.tracking.store import upload

    manifest, digest = upload(path, args.checkpoint_upload, run_id=trainer.run_id or args.run_name or "untracked",
                              dataset=trainer.dataset_id, config=ckpt.read_config(path))
    if tracker is not None:
        tracker.log_checkpoint(trainer.step, manifest, digest)
    return manifest


def run(args: argparse.Namespace) -> int:
    # A layout the world or the model cannot take stops before any process group forms.
    if args.strategy == "fsdp" and "WORLD_SIZE" not in os.environ:
        raise LayoutError("--strategy fsdp needs torchrun (a process group); start it with torchrun, even for one "
                          "process")
    plan_accumulation(args, int(os.environ.get("WORLD_SIZE", "1")))
    if args.checkpoint_upload and os.environ.get("AWS_ENDPOINT_URL_S3"):
        # A store that is not AWS S3 (a customer's): its keys are the customer's, not a role
        # the platform wrote and checks; keys broader than the tenant stop the run here.
        from workloads.tracking.store import check_scope

        check_scope(args.checkpoint_upload)
    rt = init_runtime(args.device)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    tracker = open_tracker(args, rt)
    trainer = Trainer(args, rt)
    prepare_data(args, trainer.config, rt)
    # Checked against its manifest before any step: a changed shard is named, not trained on.
    version = dataset_version.load_or_build(args.data)
    trainer.dataset_id = version.id
    data = ShardedTokens(args.data, trainer.seq_len, args.seed)
    writer = MetricsWriter(args.metrics) if rt.is_main else None
    peak = resolve_peak_tflops(args.peak_tflops, args.gpu_model)
    with torch.device("meta"):  # the whole model's counts, whatever part of it this rank holds
        whole = GPT(trainer.config)
    flops_per_token = whole.flops_per_token(trainer.seq_len)

    resume_from = None if args.no_resume or not args.checkpoint_dir else ckpt.latest_checkpoint(args.checkpoint_dir)
    if resume_from is not None:
        trainer.restore(resume_from)
    if tracker is not None:
        start_tracking(tracker, trainer, version)
    if writer:
        writer.write("start", world_size=rt.world_size, device=str(rt.device), strategy=args.strategy,
                     layout=trainer.layout.describe(rt.world_size), activation_checkpoint=args.activation_checkpoint,
                     precision=args.precision, compile=args.compile, params=whole.num_params(),
                     flops_per_token=flops_per_token, seq_len=trainer.seq_len, micro_batch=args.micro_batch,
                     grad_accum=trainer.grad_accum, global_batch=trainer.global_batch, peak_tflops=peak,
                     resumed_from=str(resume_from) if resume_from else None, step=trainer.step,
                     dataset=trainer.dataset_id)

    tokens_per_step = trainer.global_batch * trainer.seq_len
    while trainer.step < args.max_steps:
        started = time.perf_counter()
        lr = trainer.schedulers[0].get_last_lr()[0]
        loss, grad_norm = trainer.train_step(data)  # returns after the loss all-reduce: GPU work is done
        elapsed = time.perf_counter() - started
        if writer and (trainer.step % args.log_every == 0 or trainer.step == args.max_steps):
            tokens_per_s = tokens_per_step / elapsed
            writer.write("step", step=trainer.step, loss=loss, lr=lr, grad_norm=grad_norm, step_time_s=elapsed,
                         tokens_per_s=tokens_per_s, tokens_seen=trainer.samples_seen * trainer.seq_len,
                         mfu=model_flops_utilisation(tokens_per_s, flops_per_token, rt.world_size, peak)
                         if rt.device.type == "cuda" else None)
        if tracker is not None and (trainer.step % args.track_every == 0 or trainer.step == args.max_steps):
            tracker.log_metrics(trainer.step, {"loss": loss, "lr": lr, "grad_norm": grad_norm,
                                               "step_time_s": elapsed,
                                               "tokens_per_s": tokens_per_step / elapsed})
        at_end = trainer.step == args.max_steps
        if args.checkpoint_dir and (at_end or (args.checkpoint_every and trainer.step % args.checkpoint_every == 0)):
            path = trainer.save()
            uploaded = upload_checkpoint(args, trainer, path, tracker) if args.checkpoint_upload and rt.is_main else None
            if writer:
                writer.write("checkpoint", step=trainer.step, path=str(path), uploaded=uploaded)
        if args.stop_after_step is not None and trainer.step == args.stop_after_step:
            os._exit(SIMULATED_CRASH_EXIT)
    if tracker is not None:
        tracker.finish()
    if writer:
        writer.write("end", step=trainer.step, run_id=trainer.run_id or None)
        writer.close()
    if rt.distributed:
        # Leave together: a rank that tears gloo down while a peer is still in its last
        # collective can abort at exit ("terminate called without an active exception").
        dist.barrier()
        dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_checked(build_parser().parse_args(argv))


def run_checked(args: argparse.Namespace) -> int:
    """run, with a bad dataset, checkpoint, layout or tracking setting as one line, exit 2."""
    try:
        return run(args)
    except (dataset_version.DatasetMismatch, ShardError, ResumeRefused, LayoutError, TrackingError, StoreError) as err:
        # Every rank stops with the same reason: one of them says it.
        if os.environ.get("RANK", "0") == "0":
            print(f"train: error: {err}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
