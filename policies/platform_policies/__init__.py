"""The platform's policy rules, importable without starting the pack."""

from .residency import aws_resources_in_allowed_regions

PACK_NAME = "mlplat-guardrails"

ALL_POLICIES = [
    aws_resources_in_allowed_regions,
]

__all__ = ["ALL_POLICIES", "PACK_NAME"]
