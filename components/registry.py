"""`ImageRegistry`: the environment's in-region ECR repositories: one per image of the
registry plan and one per chart, under `mlplat/<environment>/` (infra/versions.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.registry_policy import lifecycle_policy
from infra.versions import Chart, Image


@dataclass(frozen=True)
class RegistryArgs:
    environment: str  # repositories are named mlplat/<environment>/...
    images: Mapping[str, Image]  # the registry plan: one repository per image
    charts: Mapping[str, Chart]  # and one per chart (an OCI chart repository)
    kms_key_arn: pulumi.Input[str]
    force_delete: bool = False  # throwaway environments only: deleting a repository deletes its images


class ImageRegistry(pulumi.ComponentResource):
    """KMS-encrypted, tag-immutable, scan-on-push repositories with a lifecycle policy:
    mirrors of every third-party image and chart the platform runs, and the platform's own
    images. `mlplat mirror` and CI fill them between the cloud and cluster layers."""

    repositories: dict[str, aws.ecr.Repository]  # image name -> repository
    chart_repositories: dict[str, aws.ecr.Repository]  # chart name -> repository

    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:registry:ImageRegistry", name, None, opts)
        policy = json.dumps(lifecycle_policy())
        # Logical names leave the environment out: each stack holds one environment.
        self.repositories = {
            image.name: self._repository(
                f"{name}-mlplat-{image.name}" if image.built_here else f"{name}-mlplat-mirror-{image.name}",
                image.repository(args.environment), args, policy)
            for image in args.images.values()
        }
        self.chart_repositories = {
            chart.name: self._repository(f"{name}-mlplat-charts-{chart.name}",
                                         chart.mirror_repository(args.environment), args, policy)
            for chart in args.charts.values()
        }
        self.register_outputs({
            "images": {n: r.repository_url for n, r in self.repositories.items()},
            "charts": {n: r.repository_url for n, r in self.chart_repositories.items()},
        })

    def _repository(self, logical: str, repository_name: str, args: RegistryArgs, policy: str) -> aws.ecr.Repository:
        child = pulumi.ResourceOptions(parent=self)
        repository = aws.ecr.Repository(
            logical,
            name=repository_name,
            # A tag always names the same image: what was scanned and approved is what runs.
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(scan_on_push=True),
            encryption_configurations=[
                aws.ecr.RepositoryEncryptionConfigurationArgs(encryption_type="KMS", kms_key=args.kms_key_arn)
            ],
            force_delete=args.force_delete,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=not args.force_delete)),
        )
        aws.ecr.LifecyclePolicy(logical, repository=repository.name, policy=policy, opts=child)
        return repository
