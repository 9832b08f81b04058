"""`make smoke`: the `deepspeed` framework preset's own command, as the JobSet renders it,
run on this CPU with a real DeepSpeed (ZeRO-1, 2 processes, gloo) from its own virtualenv.

The rendered command is kept but for where it runs: the rendezvous endpoint (the first
pod's DNS name) becomes 127.0.0.1, one node, two processes instead of the node's GPUs, and
the tenant's command is tests/frameworks/deepspeed_worker.py. Exit 0 when every rank
trained (its loss fell) and ended with the same parameters; 1 otherwise; 2 when the
virtualenv is missing (one line saying how to make it).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from components.training_spec import deepspeed_jobset  # noqa: E402
from tests.component.test_training_job import PLAN  # noqa: E402
from tests.services.oci import free_port  # noqa: E402

WORKER = REPO / "tests" / "frameworks" / "deepspeed_worker.py"
LINE = re.compile(r"rank=(\d+) world=2 master=\S+ first_loss=(\S+) last_loss=(\S+) same_params=(True|False)")


def local_command(venv: Path) -> list[str]:
    plan = replace(PLAN, framework="deepspeed", nodes=1, min_nodes=1, train_args=(), command=("python", str(WORKER)))
    manifest = deepspeed_jobset(plan)
    [trainer] = manifest["spec"]["replicatedJobs"]
    command = trainer["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    rewritten = {"--rdzv-endpoint": f"127.0.0.1:{free_port()}", "--nproc-per-node": "2", "--nnodes": "1"}
    local = [str(venv / "bin" / "torchrun")]
    for part in command[1:]:
        flag = part.split("=", 1)[0]
        local.append(f"{flag}={rewritten[flag]}" if flag in rewritten and "=" in part else part)
    return local


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--venv", type=Path, default=REPO / ".venv-deepspeed")
    venv = cli.parse_args().venv
    if not (venv / "bin" / "torchrun").exists():
        print(f"smoke: {venv}: no DeepSpeed virtualenv; run `make smoke`, which makes it", file=sys.stderr)
        return 2
    command = local_command(venv)
    print("running:", " ".join(command), flush=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    ranks = {int(m[1]): (float(m[2]), float(m[3]), m[4] == "True") for m in LINE.finditer(done.stdout)}
    ok = done.returncode == 0 and sorted(ranks) == [0, 1] and all(last < first and same
                                                                  for first, last, same in ranks.values())
    print("\n".join(m[0] for m in LINE.finditer(done.stdout)))
    if not ok:
        print(f"smoke: DeepSpeed run failed (exit {done.returncode}):\n{done.stderr[-3000:]}", file=sys.stderr)
        return 1
    print("smoke: deepspeed preset ok: 2 ranks trained under the rendered torchrun command, parameters equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
