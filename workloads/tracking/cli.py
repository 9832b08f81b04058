"""`python -m workloads.tracking`: the registry and lineage.

    python -m workloads.tracking register --run RUN_ID --name NAME [--step N]
    python -m workloads.tracking alias    --name NAME --alias production --version N
    python -m workloads.tracking rollback --name NAME --alias production
    python -m workloads.tracking lineage  models:/NAME/VERSION [--json] [--verify]

The server is --tracking-uri or MLFLOW_TRACKING_URI; credentials MLFLOW_TRACKING_USERNAME
and MLFLOW_TRACKING_PASSWORD. Exit codes: 0 done, 1 `lineage --verify` found the checkpoint
manifest in the bucket differs from the hash the registry recorded (the chain is printed,
with HASH DIFFERS), 2 bad input or an unusable server (one line, no traceback).

What is typed becomes MLflow names and tags, so it is checked first (workloads/arguments.py):
a run id as MLflow makes them (a letter or digit, then up to 255 of letters, digits, '_' and
'-'); a model name of printable characters, at most 256, without '/' or '@' (models:/ URIs
split on them); an alias of letters, digits, '_' and '-' (at most 255); a version from 1 to
2,147,483,647 (MLflow keeps it as a 32-bit integer); a step from 0 to 1,000,000,000.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable

from workloads.arguments import printable, quoted, whole
from workloads.tracking.client import TrackingError, check_server
from workloads.tracking.registry import RegistryError
from workloads.tracking.store import StoreError

PROG = "python -m workloads.tracking"
EXIT_OK, EXIT_UNVERIFIED, EXIT_BAD_INPUT = 0, 1, 2
MAX_STEP = 1_000_000_000  # training steps; the checkpoint tags write eight digits and more
MAX_VERSION = 2**31 - 1  # MLflow's model versions are 32-bit integers
MAX_NAME = 256


def _pattern(pattern: str, what: str) -> Callable[[str], str]:
    """A value that must match `pattern` in full (an id or an alias)."""

    def parse(text: str) -> str:
        if not re.fullmatch(pattern, text):
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not {what}")
        return text

    parse.__name__ = "text"
    return parse


def _model_name(text: str) -> str:
    """A registered model's name: printable, and addressable by a models:/ URI."""
    text = printable(MAX_NAME)(text)
    if "/" in text or "@" in text:
        raise argparse.ArgumentTypeError(f"{quoted(text)} holds '/' or '@', which a models:/<name>/<version> or "
                                         "models:/<name>@<alias> URI cannot carry; choose another name")
    return text


RUN_ID = _pattern(r"[A-Za-z0-9][A-Za-z0-9_-]{0,255}", "an MLflow run id (letters, digits, '_' and '-')")
ALIAS = _pattern(r"[A-Za-z0-9_-]{1,255}", "an alias of letters, digits, '_' and '-', e.g. production")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        # `self.prog` names the verb too: "python -m workloads.serve config: error: ..."
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Model registry and lineage on the platform's MLflow server")
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                        help="the MLflow server (default: $MLFLOW_TRACKING_URI)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    register = sub.add_parser("register", help="register a run's checkpoint as a new model version")
    register.add_argument("--run", required=True, type=RUN_ID, help="the training run's id")
    register.add_argument("--name", required=True, type=_model_name, help="registered model name")
    register.add_argument("--step", type=whole(0, MAX_STEP),
                          help="the checkpoint of this step (default: the newest uploaded)")
    alias = sub.add_parser("alias", help="point an alias (staging, production) at a version")
    alias.add_argument("--name", required=True, type=_model_name)
    alias.add_argument("--alias", required=True, type=ALIAS)
    alias.add_argument("--version", required=True, type=whole(1, MAX_VERSION))
    rollback = sub.add_parser("rollback", help="move an alias back to the version it held before")
    rollback.add_argument("--name", required=True, type=_model_name)
    rollback.add_argument("--alias", required=True, type=ALIAS)
    lineage = sub.add_parser("lineage", help="dataset -> run -> checkpoint -> model -> Triton -> images")
    lineage.add_argument("model", type=printable(MAX_NAME + 300),
                         help="models:/<name>/<version> or models:/<name>@<alias>")
    lineage.add_argument("--json", action="store_true", help="JSON instead of the human form")
    lineage.add_argument("--verify", action="store_true", help="also read the checkpoint manifest and check its hash")
    return parser


def _run(args: argparse.Namespace) -> int:
    uri = args.tracking_uri
    if not uri:
        raise TrackingError("no tracking server: pass --tracking-uri or set MLFLOW_TRACKING_URI")
    check_server(uri)
    if args.command == "register":
        from workloads.tracking.registry import register

        mv = register(uri, args.name, args.run, args.step)
        print(f"registered {args.name} version {mv.version} from run {args.run} ({mv.tags.get('mlplat.checkpoint.manifest', mv.source)})")
    elif args.command == "alias":
        from workloads.tracking.registry import set_alias

        before = set_alias(uri, args.name, args.alias, str(args.version))
        print(f"{args.name}@{args.alias} -> version {args.version}" + (f" (was {before})" if before else ""))
    elif args.command == "rollback":
        from workloads.tracking.registry import rollback

        was, now = rollback(uri, args.name, args.alias)
        print(f"{args.name}@{args.alias} -> version {now} (was {was})")
    else:
        from workloads.tracking.lineage import human, lineage

        chain = lineage(args.model, uri, verify=args.verify)
        print(json.dumps(chain, indent=2) if args.json else human(chain))
        if chain["checkpoint"].get("verified") is False:
            return EXIT_UNVERIFIED
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (TrackingError, RegistryError, StoreError) as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:
        from mlflow.exceptions import MlflowException

        if not isinstance(err, MlflowException):
            raise
        first = (err.message.strip().splitlines() or [err.error_code])[0]
        print(f"{PROG} {args.command}: error: the tracking server refused: {first}", file=sys.stderr)
        return EXIT_BAD_INPUT
