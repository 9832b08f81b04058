"""`python -m workloads.pipeline`: the golden path's steps as the pipeline's tasks run them.

    python -m workloads.pipeline check --params golden.yaml
    python -m workloads.pipeline step <name> --params golden.yaml --run <run id>
    python -m workloads.pipeline triggers --params golden.yaml [--min-interval-h 24]
    python -m workloads.pipeline guard --params golden.yaml --run <run id> [--min-interval-h 24]
    python -m workloads.pipeline engine migrate|api-server|scheduler|dag-processor

`step` runs one step of a run as its tenant (MLPLAT_TENANT, MLFLOW_TRACKING_URI and the
credentials its pod has), after the steps before it; a step the run's ledger holds is not
run again, its recorded outputs are printed. The last stdout line is the step's outputs as
JSON. `guard` prints whether a run may start now; `triggers` prints whether a new dataset version or a drift verdict calls for a run
(workloads/pipeline/triggers.py). Exit codes: 0 done, 1 the step failed (a rerun continues from it), 2 bad parameters
or a run this tenant may not touch."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from workloads.arguments import real
from workloads.inputs import InputError
from workloads.pipeline.params import PipelineInputError, check_run_id, load
from workloads.pipeline.steps import BY_NAME, STEPS, StepError

PROG = "python -m workloads.pipeline"
MIN_INTERVAL_H = 24.0  # the storm guard's default: one new run a day at most


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _step(args: argparse.Namespace) -> int:
    from workloads.pipeline.ledger import Ledger
    from workloads.pipeline.steps import Context

    run = check_run_id(args.run)
    params = load(args.params)
    tracking_uri = _tracking_uri()
    ledger = Ledger.open(tracking_uri, params, run)
    done = ledger.outputs()
    if args.name in done:
        print(json.dumps(done[args.name], sort_keys=True))
        return 0
    before = [s.name for s in STEPS[:[s.name for s in STEPS].index(args.name)]]
    if missing := [name for name in before if name not in done]:
        raise PipelineInputError(f"step {args.name} of run {run} needs step {missing[0]} first")
    outputs = BY_NAME[args.name].run(Context(params, run, ledger.run_id, done, tracking_uri))
    ledger.record(args.name, outputs)
    if args.name == STEPS[-1].name:
        ledger.finish()
    print(json.dumps(outputs, sort_keys=True))
    return 0


def _tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise PipelineInputError("MLFLOW_TRACKING_URI is not set: the run's ledger and lineage are the tenant's "
                                 "MLflow server")
    return uri


def _triggers(args: argparse.Namespace) -> int:
    from workloads.pipeline.triggers import decide

    print(json.dumps(decide(_tracking_uri(), load(args.params), args.min_interval_h), sort_keys=True))
    return 0


def _guard(args: argparse.Namespace) -> int:
    from workloads.pipeline.triggers import guard

    said = guard(_tracking_uri(), load(args.params), check_run_id(args.run), args.min_interval_h)
    print(json.dumps(said, sort_keys=True))
    return 0


def _check(args: argparse.Namespace) -> int:
    params = load(args.params)
    print(f"{args.params}: a golden-path run of {params.model} for tenant {params.tenant}")
    return 0


def _engine(args: argparse.Namespace) -> int:
    from workloads.pipeline.engine import main as engine

    return engine([args.component])


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog=PROG, description="The golden-path pipeline's steps")
    verbs = top.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    check = verbs.add_parser("check", help="check a parameter file as a run would")
    check.add_argument("--params", required=True, help="the run's parameters (YAML or JSON)")
    check.set_defaults(run_verb=_check)
    step = verbs.add_parser("step", help="run one step of a run (skipped when its ledger holds it)")
    step.add_argument("name", choices=[s.name for s in STEPS])
    step.add_argument("--params", required=True, help="the run's parameters (YAML or JSON)")
    step.add_argument("--run", required=True, help="the pipeline run's id (Airflow's run id, made safe)")
    step.set_defaults(run_verb=_step)
    interval = {"type": real(0, 8760), "default": MIN_INTERVAL_H, "metavar": "H",
                "help": f"none within H hours of the last run's start, 0 to 8760 (default {MIN_INTERVAL_H:g})"}
    triggers = verbs.add_parser("triggers", help="whether a new dataset version or drift calls for a run")
    triggers.add_argument("--params", required=True, help="the run's parameters (YAML or JSON)")
    triggers.add_argument("--min-interval-h", **interval)
    triggers.set_defaults(run_verb=_triggers)
    held = verbs.add_parser("guard", help="whether a run may start now (a new run within the interval may not)")
    held.add_argument("--params", required=True, help="the run's parameters (YAML or JSON)")
    held.add_argument("--run", required=True, help="the pipeline run's id")
    held.add_argument("--min-interval-h", **interval)
    held.set_defaults(run_verb=_guard)
    from workloads.pipeline.engine import COMPONENTS

    engine = verbs.add_parser("engine", help="one process of the tenant's Airflow, as its pods run it")
    engine.add_argument("component", choices=list(COMPONENTS))
    engine.set_defaults(run_verb=_engine)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from workloads.tracking.client import TrackingError
    from workloads.tracking.registry import RegistryError
    from workloads.tracking.store import StoreError

    try:
        return args.run_verb(args)
    except InputError as err:  # PipelineInputError too
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (StepError, TrackingError, RegistryError, StoreError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except Exception as err:
        from mlflow.exceptions import MlflowException

        # What a step met that it has no name for (a record it cannot read, a file a tool
        # left half-written): one line naming the verb, exit 1, and a rerun continues.
        if not isinstance(err, (MlflowException, LookupError, TypeError, ValueError, OSError)):
            raise
        said = str(err).splitlines()[0] if str(err) else ""
        print(f"error: {args.verb}{' ' + args.name if args.verb == 'step' else ''}: {type(err).__name__}: {said}",
              file=sys.stderr)
        return 1
