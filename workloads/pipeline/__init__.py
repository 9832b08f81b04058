"""The ML lifecycle as one pipeline: features -> dataset version -> training -> evaluation
against production -> registry -> Triton repository -> production alias -> drift baseline.

Each step runs in its own image as `python -m workloads.pipeline step <name>` and records its
outputs in the run's ledger (an MLflow run of the tenant's `pipelines` experiment), so a rerun
of the same run skips what finished and a step that died half-way is redone without
publishing twice. Airflow (`workloads/pipeline/dag.py`) orders the steps and triggers runs;
docs/pipelines.md says why Airflow and how the loop runs in a cluster and on one machine.
"""
