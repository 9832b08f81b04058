"""Checkpoints: `torch.distributed.checkpoint` (DCP) directories, written atomically.

Layout under a checkpoint root (the shared Lustre mount, or a local dir):

    step_00000100/        a complete checkpoint: DCP's `.metadata` and `*.distcp` files,
                          plus `config.json` (model config and run facts)
    .tmp-step_00000200/   a checkpoint being written; ignored by every reader

Every rank writes its shards into the temporary directory; only after DCP has written its
`.metadata` (the last thing it writes) does rank 0 add `config.json` and rename the directory
to its final name. A rename within one file system is atomic, so a job killed at any moment
leaves either a complete checkpoint or a `.tmp-` directory that readers skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from workloads import inputs
from workloads.train.model import GPT, GPTConfig

CONFIG_FILE = "config.json"
CONFIG_LIMIT = 1 << 20  # a few hundred bytes: the model, the layout, the precision
DCP_METADATA = ".metadata"  # DCP writes it after every shard, so its presence means complete
_STEP_DIR = re.compile(r"^step_(\d{8})$")
FORMAT_VERSION = 1


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def is_complete(path: Path) -> bool:
    return (
        _STEP_DIR.match(path.name) is not None
        and (path / DCP_METADATA).is_file()
        and (path / CONFIG_FILE).is_file()
    )


def complete_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under `root`, oldest step first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_complete(p))


def latest_checkpoint(root: str | Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def checkpoint_step(path: Path) -> int:
    match = _STEP_DIR.match(path.name)
    if match is None:
        raise ValueError(f"{path} is not a checkpoint directory (step_NNNNNNNN)")
    return int(match.group(1))


def read_config(path: Path) -> dict[str, Any]:
    # Bounded: a checkpoint handed to `serve export` may be anyone's folder.
    config = inputs.read_json(path / CONFIG_FILE, "checkpoint config", CONFIG_LIMIT)
    if not isinstance(config, dict):
        raise inputs.InputError(f"{inputs.shown(path / CONFIG_FILE)}: not a checkpoint config (a JSON object)")
    return config


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


@contextmanager
def _single_process_is_intended() -> Iterator[None]:
    """Without a process group DCP warns that it assumes a single process: that is what
    a one-process run or an inference loader means, so the warning is noise there."""
    with warnings.catch_warnings():
        if not dist.is_initialized():
            warnings.filterwarnings("ignore", message=".*in a single process", category=UserWarning)
        yield


def _write_json(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(partial, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(root: str | Path, step: int, state: dict[str, Any], config: dict[str, Any], keep: int = 0) -> Path:
    """Write `state` (a DCP state dict; every rank calls this) as checkpoint `step`.

    `config` goes to `config.json` (rank 0 writes it). `keep` > 0 deletes all but the
    newest `keep` complete checkpoints afterwards. Returns the final directory.
    """
    root = Path(root)
    final = step_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    if _rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed mid-write
        tmp.mkdir()
    _barrier()
    with _single_process_is_intended():
        dcp.save(state, checkpoint_id=str(tmp))
    if _rank() == 0:
        _write_json(tmp / CONFIG_FILE, {"format": FORMAT_VERSION, "step": step, **config})
        _fsync_dir(tmp)
        if final.exists():  # the same step saved again after a resume: replace it whole
            old = root / f".tmp-old-{final.name}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(root)
        if keep > 0:
            for stale in complete_checkpoints(root)[:-keep]:
                shutil.rmtree(stale, ignore_errors=True)
    _barrier()
    return final


def load(path: str | Path, state: dict[str, Any]) -> None:
    """Load checkpoint `path` into `state` in place (every rank calls this); DCP reshards
    to the current world size and parallelism."""
    with _single_process_is_intended():
        dcp.load(state, checkpoint_id=str(path))


def resolve(checkpoint_dir: str | Path) -> Path:
    """A checkpoint directory itself, or the latest complete one under a root."""
    path = Path(checkpoint_dir)
    if is_complete(path):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise FileNotFoundError(f"no complete checkpoint in {path}")
    return latest


def load_for_inference(checkpoint_dir: str | Path) -> tuple[GPT, GPTConfig]:
    """The model of the latest complete checkpoint under `checkpoint_dir` (or of that
    checkpoint itself) as a plain CPU `GPT` in eval mode. Needs no process group; works for
    checkpoints written by DDP or FSDP2 runs of any world size."""
    path = resolve(checkpoint_dir)
    config = GPTConfig.from_dict(read_config(path)["model"])
    model = GPT(config)
    state = {"model": model.state_dict()}
    with _single_process_is_intended():
        dcp.load(state, checkpoint_id=str(path))
    model.load_state_dict(state["model"])
    model.eval()
    return model, config


def rng_states() -> dict[str, torch.Tensor]:
    """This process's random generator states."""
    states = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(states["cpu"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])
