"""`python -m workloads.train`: the command line is checked first (workloads/train/options.py,
no torch), so a bad flag is refused in one line without the seconds torch takes to import."""

import sys

from workloads.train.options import build_parser

args = build_parser().parse_args()

from workloads.train.train import run_checked  # noqa: E402 - after the flags are checked

sys.exit(run_checked(args))
