"""Feast's S3 registry store, as a tenant's role can use it and without lost updates.

Feast's own store checks the bucket (HeadBucket, which IAM authorizes as `s3:ListBucket`
with no prefix) before every read. A tenant's role lists only its own prefix, so that check
is refused. This store reads the object alone.

The registry is one object that `apply` and the materialization job both rewrite whole
(read, change, write). Each write is conditional on the version this process last read
(S3's If-Match; If-None-Match for the first). A writer that lost the race stops with one
line and changes nothing, instead of dropping the other writer's views or intervals. The
CronJob's next run, or the tenant's re-run, reads the new version."""

from __future__ import annotations

import uuid

from botocore.exceptions import ClientError
from feast.infra.registry.s3 import S3RegistryStore
from feast.protos.feast.core.Registry_pb2 import Registry as RegistryProto
from feast.utils import _utc_now


class RegistryConflict(Exception):
    """Another writer changed the registry since this process read it."""


class TenantS3RegistryStore(S3RegistryStore):
    _etag: str | None = None

    def get_registry_proto(self) -> RegistryProto:
        client = self.s3_client.meta.client
        try:
            reply = client.get_object(Bucket=self._bucket, Key=self._key)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                self._etag = None
                raise FileNotFoundError(f"no registry at {self._uri.geturl()} yet") from None
            raise PermissionError(f"{self._uri.geturl()}: {code} reading the registry; the pod's role must be "
                                  "its tenant's feature-store role") from None
        self._etag = reply["ETag"]
        proto = RegistryProto()
        proto.ParseFromString(reply["Body"].read())
        return proto

    def _write_registry(self, registry_proto: RegistryProto) -> None:
        registry_proto.version_id = str(uuid.uuid4())
        registry_proto.last_updated.FromDatetime(_utc_now())
        condition = {"IfMatch": self._etag} if self._etag else {"IfNoneMatch": "*"}
        try:
            reply = self.s3_client.meta.client.put_object(
                Bucket=self._bucket, Key=self._key, Body=registry_proto.SerializeToString(),
                **condition, **self._boto_extra_args)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise RegistryConflict(f"{self._uri.geturl()} changed while this run held it (another apply or "
                                       "materialization); nothing was written: run it again") from None
            raise
        self._etag = reply["ETag"]
