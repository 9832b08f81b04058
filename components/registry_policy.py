"""ECR lifecycle policies, as plain data. Nothing here imports Pulumi."""

from __future__ import annotations

# Untagged manifests are left behind by interrupted pushes and by multi-arch indexes whose
# tags moved on; two weeks leaves time to notice a broken mirror run.
UNTAGGED_DAYS = 14
# Tags are immutable, so every version bump in the registry plan adds one; the older ones
# are kept for rollbacks.
KEEP_TAGGED = 20


def lifecycle_policy(untagged_days: int = UNTAGGED_DAYS, keep_tagged: int = KEEP_TAGGED) -> dict:
    """Expire untagged images after `untagged_days`; keep the newest `keep_tagged` tagged ones."""
    for label, value in (("untagged_days", untagged_days), ("keep_tagged", keep_tagged)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a whole number, 1 or more; got {value!r}")
    return {
        "rules": [
            {
                "rulePriority": 1,
                "description": f"expire untagged images after {untagged_days} days",
                "selection": {
                    "tagStatus": "untagged",
                    "countType": "sinceImagePushed",
                    "countUnit": "days",
                    "countNumber": untagged_days,
                },
                "action": {"type": "expire"},
            },
            {
                "rulePriority": 2,
                "description": f"keep the {keep_tagged} newest tagged images",
                "selection": {
                    "tagStatus": "tagged",
                    "tagPatternList": ["*"],
                    "countType": "imageCountMoreThan",
                    "countNumber": keep_tagged,
                },
                "action": {"type": "expire"},
            },
        ]
    }
