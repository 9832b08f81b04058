"""Where each tenant's data lives in the platform's buckets, as key prefixes. Every role a
tenant's namespace can take on reaches these prefixes of its own tenant and no other's,
and the bucket policies keep the shared prefixes to their owners (infra/storage.py).

- datasets bucket: `<tenant>/` (linked to the tenant's Lustre directory,
  components/lustre_spec.py), `features/<tenant>/` (components/features_spec.py) and
  `request-logs/<model>/` (the model's owner; components/request_log_spec.py);
- checkpoints bucket: `runs/<tenant>/`;
- models bucket: the model repository (`triton/`, the model's publisher) and `mlflow/`
  (the tracking server alone: clients reach artifacts through it).
"""

from __future__ import annotations

RUNS = "runs"


def datasets_prefix(tenant: str) -> str:
    return f"{tenant}/"


def checkpoints_prefix(tenant: str) -> str:
    return f"{RUNS}/{tenant}/"


def list_condition(prefix: str) -> dict[str, dict[str, list[str]]]:
    """ListBucket under `prefix` only: the prefix with its slash, and anything below it.
    Never the prefix without its slash: a listing of `research` returns `research-2/...`,
    another tenant's keys."""
    if not prefix.endswith("/"):
        raise ValueError(f"{prefix!r}: a listing prefix ends with its slash")
    return {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}}
