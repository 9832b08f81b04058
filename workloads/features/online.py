"""Feast's Redis online store, authenticated to ElastiCache with IAM: the password of a
tenant's user is a SigV4-signed `connect` request made from the pod's own role (Pod
Identity), valid 15 minutes and renewed before it expires, so no password exists.

Feast picks the class by its `type:` in feature_store.yaml and the config class by the
name with `Config` appended; only how the client is made differs from Feast's store."""

from __future__ import annotations

import threading
import time
from typing import Literal
from urllib.parse import quote

import botocore.session
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from feast.infra.online_stores.redis import RedisOnlineStore, RedisOnlineStoreConfig, RedisType
from pydantic import StrictStr, field_validator
from redis import Redis
from redis import asyncio as redis_asyncio
from redis.credentials import CredentialProvider

from workloads import inputs

TOKEN_SECONDS = 900  # ElastiCache accepts a token for 15 minutes...
RENEW_SECONDS = 600  # ...and new connections get a fresh one well before that
PASSWORD_LIMIT = 64 << 10  # a password is well under a kilobyte


class IamCredentials(CredentialProvider):
    """(user, token) for each new connection; the token is reused while it is fresh."""

    def __init__(self, user: str, cache_name: str, region: str) -> None:
        self.user, self.cache_name, self.region = user, cache_name, region
        self._session = botocore.session.get_session()
        self._lock = threading.Lock()
        self._token, self._made = "", 0.0

    def token(self) -> str:
        credentials = self._session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials to sign the ElastiCache token with: the pod's ServiceAccount "
                               "needs its Pod Identity association")
        request = AWSRequest(method="GET", url=f"https://{self.cache_name}/?Action=connect&User={quote(self.user)}")
        SigV4QueryAuth(credentials.get_frozen_credentials(), "elasticache", self.region,
                       expires=TOKEN_SECONDS).add_auth(request)
        return request.url.removeprefix("https://")

    def get_credentials(self) -> tuple[str, str]:
        with self._lock:
            if not self._token or time.monotonic() - self._made > RENEW_SECONDS:
                self._token, self._made = self.token(), time.monotonic()
            return self.user, self._token


class IamRedisOnlineStoreConfig(RedisOnlineStoreConfig):
    type: Literal["workloads.features.online.IamRedisOnlineStore"] = "workloads.features.online.IamRedisOnlineStore"
    user: StrictStr  # the tenant's ElastiCache user (with IAM, its id and name)
    cache_name: StrictStr  # the replication group id, which the token is signed for
    region: StrictStr

    @field_validator("redis_type")
    @classmethod
    def _one_primary(cls, value: RedisType) -> RedisType:
        if value != RedisType.redis:
            raise ValueError("only redis_type: redis (the replication group's primary endpoint) is supported")
        return value


class IamRedisOnlineStore(RedisOnlineStore):
    def _connection(self, config: IamRedisOnlineStoreConfig) -> dict:
        nodes, kwargs = self._parse_connection_string(config.connection_string)
        kwargs.pop("password", None)
        kwargs.pop("username", None)
        return {"host": nodes[0]["host"], "port": int(nodes[0]["port"]),
                "credential_provider": IamCredentials(config.user, config.cache_name, config.region), **kwargs}

    def _get_client(self, online_store_config: IamRedisOnlineStoreConfig):
        if not self._client:
            self._client = Redis(**self._connection(online_store_config))
        return self._client

    async def _get_client_async(self, online_store_config: IamRedisOnlineStoreConfig):
        if not self._client_async:
            self._client_async = redis_asyncio.Redis(**self._connection(online_store_config))
        return self._client_async


# --- A customer's cluster ---------------------------------------------------------------
#
# The customer's own Redis (docs/onprem.md): the tenant's user and its password, which the
# customer's Kubernetes Secret holds and the pod has as a mounted file. The file is read for
# every new connection, so a rotated password (the kubelet updates the file) is picked up
# without a restart; the password is never in feature_store.yaml or the environment.


class PasswordFileCredentials(CredentialProvider):
    def __init__(self, user: str, password_file: str) -> None:
        self.user, self.password_file = user, password_file

    def get_credentials(self) -> tuple[str, str]:
        try:
            # Bounded: a mounted Secret's key is a small regular file, never a FIFO or a device.
            password = inputs.read_text(self.password_file, "Redis password file", PASSWORD_LIMIT).strip()
        except inputs.InputError as err:
            raise RuntimeError(f"{err} (the customer's Secret must be in the tenant's namespace)") from None
        if not password:
            raise RuntimeError(f"{self.password_file}: is empty; the customer's Secret holds no Redis password")
        return self.user, password


class PasswordFileRedisOnlineStoreConfig(RedisOnlineStoreConfig):
    type: Literal["workloads.features.online.PasswordFileRedisOnlineStore"] = \
        "workloads.features.online.PasswordFileRedisOnlineStore"
    user: StrictStr  # the tenant's Redis user, whose ACL reaches its project's keys alone
    password_file: StrictStr

    @field_validator("redis_type")
    @classmethod
    def _one_primary(cls, value: RedisType) -> RedisType:
        if value != RedisType.redis:
            raise ValueError("only redis_type: redis (one primary endpoint) is supported")
        return value

    @field_validator("connection_string")
    @classmethod
    def _no_password_inline(cls, value: str) -> str:
        if any(part.strip().startswith(("password=", "username=")) for part in value.split(",")):
            raise ValueError("names a password or user; the user is `user`, the password `password_file`")
        return value


class PasswordFileRedisOnlineStore(RedisOnlineStore):
    def _connection(self, config: PasswordFileRedisOnlineStoreConfig) -> dict:
        nodes, kwargs = self._parse_connection_string(config.connection_string)
        return {"host": nodes[0]["host"], "port": int(nodes[0]["port"]),
                "credential_provider": PasswordFileCredentials(config.user, config.password_file), **kwargs}

    def _get_client(self, online_store_config: PasswordFileRedisOnlineStoreConfig):
        if not self._client:
            self._client = Redis(**self._connection(online_store_config))
        return self._client

    async def _get_client_async(self, online_store_config: PasswordFileRedisOnlineStoreConfig):
        if not self._client_async:
            self._client_async = redis_asyncio.Redis(**self._connection(online_store_config))
        return self._client_async
