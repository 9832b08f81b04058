"""`ImageRegistry`: the in-region ECR repositories, one per image of the registry plan."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.registry_policy import lifecycle_policy
from infra.versions import Image


@dataclass(frozen=True)
class RegistryArgs:
    images: Mapping[str, Image]  # the registry plan: one repository per image
    kms_key_arn: pulumi.Input[str]
    force_delete: bool = False  # throwaway environments only: deleting a repository deletes its images


class ImageRegistry(pulumi.ComponentResource):
    """KMS-encrypted, tag-immutable, scan-on-push repositories with a lifecycle policy:
    mirrors of every third-party image the platform runs, and the platform's own images."""

    repositories: dict[str, aws.ecr.Repository]  # image name -> repository

    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:registry:ImageRegistry", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        policy = json.dumps(lifecycle_policy())
        self.repositories = {}
        for image in args.images.values():
            logical = f"{name}-{image.repository.replace('/', '-')}"
            repository = aws.ecr.Repository(
                logical,
                name=image.repository,
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
            self.repositories[image.name] = repository
        self.register_outputs({n: r.repository_url for n, r in self.repositories.items()})
