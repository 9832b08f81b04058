"""Monitoring of served models: drift of the logged inputs against the training reference
(drift.py), and `python -m workloads.monitor` (cli.py)."""
