"""The online reader: what `FeatureStore.get_online_features(...).to_dict()` returns, read in
the caller's process for the request path (serving's pre- and post-processing), in one
pipelined round trip to Redis.

Feast's own read resolves the request, then builds a response protobuf entity by entity and
converts it back; at 10 and 100 entities that work is most of its time. The
reader resolves a feature list once into a plan (the views grouped by the join keys that
make their Redis key, and the hash fields each group asks for) and on each call only
encodes the keys, sends one HMGET per distinct entity and key group, and decodes. What
decides a result is Feast's own code, called as Feast calls it: the request's resolution
(`_get_online_request_context`), the key encoding (`_redis_key`), the field hashes
(`_mmh3`) and the value decoding (`feast_value_type_to_python_type`). Feast is pinned
(the Makefile's FEATURES_PINS); tests/services/test_feature_reader.py checks the results
equal `get_online_features` over every value type Feast supports, so an upgrade that
changes any of these fails there.

Two rules to know:
- Feast 0.66 does not drop a value older than its view's TTL when it reads online (the
  TTL bounds what materialization copies; `key_ttl_seconds` lets Redis expire keys). The
  reader returns what Feast returns: an expired Redis key is missing in both.
- Entity keys are checked strictly, where Feast coerces: 1.5 or True for an integer key,
  or 7 for a string key, would read another entity's row; here it is an EntityKeyError
  naming the key.

The registry is refreshed by a background thread (every `refresh_seconds`, default the
config's `cache_ttl_seconds`); a call never waits for S3. The Redis client is the online
store's own, so the IAM token (or the customer's password file), the ACL user and TLS are
exactly the feature server's."""

from __future__ import annotations

import itertools
import logging
import struct
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import numpy as np
from feast import FeatureService, FeatureStore
from feast.errors import FeastObjectNotFoundException, FeatureNameCollisionError
from feast.infra.online_stores.helpers import _mmh3, _redis_key
from feast.infra.online_stores.redis import RedisOnlineStore, _versioned_fv_name
from feast.protos.feast.types.EntityKey_pb2 import EntityKey as EntityKeyProto
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.type_map import feast_value_type_to_python_type, python_values_to_proto_values
from feast.value_type import ValueType
from google.protobuf.timestamp_pb2 import Timestamp

log = logging.getLogger(__name__)

MAX_ENTITIES = 10_000  # per call: a request path reads tens, a batch job uses the offline store
MAX_PLANS = 1_000  # feature lists planned and kept; a service asks for a handful
INT_RANGE = {ValueType.INT32: (-(1 << 31), (1 << 31) - 1), ValueType.INT64: (-(1 << 63), (1 << 63) - 1)}
KEY_TYPES = (ValueType.INT32, ValueType.INT64, ValueType.STRING, ValueType.BYTES)


class ReaderError(ValueError):
    """A request the reader refuses; the message names the view, feature or key."""


class UnknownFeatureView(ReaderError):
    def __init__(self, view: str, project: str) -> None:
        super().__init__(f"feature view {view!r} is not in project {project!r}")
        self.view = view


class UnknownFeature(ReaderError):
    def __init__(self, view: str, feature: str) -> None:
        super().__init__(f"feature view {view!r} has no feature {feature!r}")
        self.view, self.feature = view, feature


class EntityKeyError(ReaderError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"entity key {key!r}: {problem}")
        self.key = key


@dataclass(frozen=True)
class _View:
    name: str  # as the response names it (the projection's)
    features: tuple[str, ...]
    types: tuple[ValueType, ...]
    start: int  # where its fields begin in its group's HMGET reply


@dataclass(frozen=True)
class _Group:
    """The views one Redis key reads: those with the same join keys."""
    join_keys: tuple[str, ...]  # sorted, as Feast's key encoding sorts them
    fields: tuple[bytes | str, ...]  # each view's feature hashes, then its `_ts:` field
    views: tuple[_View, ...]
    head: bytes  # the key's bytes before the values: the count of join keys and their names


@dataclass(frozen=True)
class _Plan:
    groups: tuple[_Group, ...]
    key_types: Mapping[str, ValueType]  # join key -> its entity's type
    result_keys: frozenset[str]  # the join keys Feast echoes when a row names them
    columns: tuple[tuple[str, int, int, int], ...]  # each feature in Feast's order: (name, group, view, index)


class FeatureReader:
    """`read(features, entity_rows)` returns what `store.get_online_features(features,
    entity_rows).to_dict()` returns. Thread-safe; `close()` stops the refresh thread."""

    def __init__(self, store: FeatureStore, refresh_seconds: float | None = None) -> None:
        online = store._get_provider().online_store
        if not isinstance(online, RedisOnlineStore):
            raise ReaderError(f"the online store is {type(online).__name__}; the reader reads Feast's Redis store")
        self.store, self.project = store, store.project
        self._client = online._get_client(store.config.online_store)
        self._version = store.config.entity_key_serialization_version
        if self._version != 3:
            raise ReaderError(f"entity_key_serialization_version {self._version}: the reader reads version 3 keys")
        self._project_bytes = self.project.encode()
        self._plans: dict[tuple[tuple[str, ...], bool], _Plan] = {}
        self._lock = threading.Lock()
        ttl = store.config.registry.cache_ttl_seconds
        self.refresh_seconds = refresh_seconds if refresh_seconds is not None else (ttl or 60)
        self.refreshed = time.monotonic()  # when the registry was last read
        self.refresh_failures = 0
        self._stop = threading.Event()
        self._registry = _copy(store.registry._get_registry_proto(self.project, allow_cache=True))
        self._generation = 0  # counts the registries planned against; a plan of an older one is not kept
        self._thread = threading.Thread(target=self._refresh_loop, name="feature-reader-registry", daemon=True)
        self._thread.start()

    # --- the registry, off the request path -----------------------------------------------

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_seconds):
            self.refresh()

    def refresh(self) -> None:
        """Read the registry again; when it changed, re-plan every feature list in use (a
        list whose view is gone is dropped, and its next read raises)."""
        try:
            self.store.registry.refresh(self.project)
            proto = self.store.registry._get_registry_proto(self.project, allow_cache=True)
        except Exception as err:  # S3 unreachable: keep serving the registry we have
            self.refresh_failures += 1
            log.warning("feature registry refresh failed, serving the last one read: %s", err)
            return
        self.refreshed = time.monotonic()
        # Compared with a copy: Feast changes its cached registry in place when this store
        # itself applies or deletes, so the object it returns always equals itself.
        if proto == self._registry:
            return
        with self._lock:
            self._generation += 1
        plans = {}
        for key in list(self._plans):
            try:
                plans[key] = self._resolve(*key)
            except ReaderError:
                pass
            except Exception as err:  # noqa: BLE001 - the thread must live: that list is planned again when read
                log.warning("feature list %s could not be planned again: %s", key[0], err)
        with self._lock:
            self._registry, self._plans = _copy(proto), plans

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> FeatureReader:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # --- planning a feature list ----------------------------------------------------------

    def _plan(self, features: Sequence[str] | FeatureService, full_feature_names: bool) -> _Plan:
        if isinstance(features, FeatureService):
            key: tuple = (features, bool(full_feature_names))
        elif isinstance(features, (str, bytes)) or not isinstance(features, Sequence) or not features \
                or not all(isinstance(f, str) for f in features):
            raise ReaderError(f"features {features!r}: expected a non-empty list of '<feature view>:<feature>'")
        else:
            key = (tuple(features), bool(full_feature_names))
        plan = self._plans.get(key)
        if plan is None:
            generation = self._generation
            plan = self._resolve(*key)
            with self._lock:
                if len(self._plans) >= MAX_PLANS:  # a caller making up feature lists: bounded memory
                    self._plans.clear()
                if generation == self._generation:  # else a refresh came between: plan again next time
                    self._plans[key] = plan
        return plan

    def _resolve(self, features: tuple[str, ...] | FeatureService, full_feature_names: bool) -> _Plan:
        from feast import utils

        if isinstance(features, FeatureService):  # a service names its views' projections itself
            refs = [f"{p.name}:{f.name}" for p in features.feature_view_projections for f in p.features]
        else:
            refs = list(features)
        for ref in refs:
            if not isinstance(ref, str) or ref.count(":") != 1 or "@" in ref:
                raise ReaderError(f"feature {ref!r}: expected '<feature view>:<feature>'")
        registry = self.store.registry
        for ref in refs:  # Feast's own messages for these name neither the view nor the feature
            view, feature = ref.split(":")
            try:
                known = registry.get_any_feature_view(view, self.project, allow_cache=True)
            except FeastObjectNotFoundException:
                raise UnknownFeatureView(view, self.project) from None
            if feature not in {f.name for f in known.features}:
                raise UnknownFeature(view, feature)
        try:
            (_refs, odfvs, entity_names, key_types, join_keys_set, grouped, _names, request_data,
             entityless) = utils._get_online_request_context(
                registry, self.project, features if isinstance(features, FeatureService) else list(features),
                full_feature_names)
        except FeatureNameCollisionError as err:
            raise ReaderError(f"{err} (read with full_feature_names=True)") from None
        if odfvs or request_data:
            raise ReaderError(f"on-demand feature views ({', '.join(v.name for v in odfvs)}) are Feast's to "
                              "compute: read them with get_online_features")
        if entityless:
            raise ReaderError("feature views without entities are not read here: use get_online_features")
        groups: dict[tuple[str, ...], list[tuple[Any, list[str]]]] = {}
        for table, wanted in grouped:
            keys = tuple(sorted(entity_names[e] for e in table.entities))
            groups.setdefault(keys, []).append((table, wanted))
        planned, at, columns = [], {}, []
        for g, (keys, tables) in enumerate(groups.items()):
            for key in keys:
                if key_types.get(key) not in KEY_TYPES:
                    raise EntityKeyError(key, f"its type {key_types.get(key)} is not read here (int32, int64, "
                                              "string and bytes are)")
            fields: list[bytes | str] = []
            views = []
            for v, (table, wanted) in enumerate(tables):
                name = _versioned_fv_name(table, self.store.config)
                types = {f.name: f.dtype.to_value_type() for f in table.features}
                views.append(_View(table.projection.name_to_use(), tuple(wanted), tuple(types[f] for f in wanted),
                                   len(fields)))
                fields += [_mmh3(f"{name}:{f}") for f in wanted] + [f"_ts:{name}"]
                at[id(table)] = (g, v)
            group = _Group(keys, tuple(fields), tuple(views), _key_head(keys))
            _check_encoding(group, key_types, self.project, self._version)
            planned.append(group)
        for table, wanted in grouped:
            g, v = at[id(table)]
            view = planned[g].views[v]
            columns += [(f"{view.name}__{f}" if full_feature_names else f, g, v, k) for k, f in enumerate(wanted)]
        return _Plan(tuple(planned), dict(key_types), frozenset(join_keys_set), tuple(columns))

    # --- the read ---------------------------------------------------------------------------

    def read(self, features: Sequence[str] | FeatureService,
             entity_rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]], full_feature_names: bool = False,
             include_event_timestamps: bool = False) -> dict[str, list[Any]]:
        plan = self._plan(features, full_feature_names)
        columns, rows = _columns(entity_rows)
        keyed = {}  # join key -> its values, checked, as Python values
        out: dict[str, list[Any]] = {}
        for name, values in columns.items():  # names that are no join key are not Feast's to read
            if name in plan.key_types:
                keyed[name] = _key_values(name, values, plan.key_types[name])
            if name in plan.result_keys:  # echoed as Feast echoes them, with no event time
                out[name] = keyed[name] if name in keyed else _echoed(name, values)
                if include_event_timestamps:
                    out[f"{name}__ts"] = [0] * rows
        # Each group's distinct entities, one HMGET each, all in one round trip.
        keys_of: list[list[bytes]] = []  # per group: its distinct keys, in first-seen order
        rows_of: list[list[int]] = []  # per group: each row's index among them
        project = self._project_bytes
        for group in plan.groups:
            missing = [k for k in group.join_keys if k not in keyed]
            if missing:
                raise EntityKeyError(missing[0], "missing from the entity rows")
            try:
                if len(group.join_keys) == 1:
                    encode, head = _ENCODERS[plan.key_types[group.join_keys[0]]], group.head
                    keys = [head + encode(value) + project for value in keyed[group.join_keys[0]]]
                else:
                    encoders = [(keyed[k], _ENCODERS[plan.key_types[k]]) for k in group.join_keys]
                    keys = [b"".join([group.head, *[encode(values[r]) for values, encode in encoders], project])
                            for r in range(rows)]
            except UnicodeEncodeError as err:  # a lone surrogate: no UTF-8 for it, so no key
                raise EntityKeyError(", ".join(group.join_keys), f"{err.object!r} is not UTF-8 text") from None
            distinct = dict(zip(dict.fromkeys(keys), itertools.count()))
            keys_of.append(list(distinct))
            rows_of.append([distinct[k] for k in keys])
        if len(keys_of) == 1 and len(keys_of[0]) == 1:  # one command needs no pipeline
            replies = [self._client.hmget(keys_of[0][0], plan.groups[0].fields)]
        else:
            pipe = self._client.pipeline(transaction=False)
            for group, keys in zip(plan.groups, keys_of):
                for key in keys:
                    pipe.hmget(key, group.fields)
            replies = pipe.execute()
        decoded: list[list[tuple[list[Any], int]]] = []  # per group, per view: per distinct entity
        at = 0
        for group, keys in zip(plan.groups, keys_of):
            mine, at = replies[at:at + len(keys)], at + len(keys)
            decoded.append([[_decode(reply, view, include_event_timestamps) for reply in mine]
                            for view in group.views])
        for name, g, v, k in plan.columns:
            entities = decoded[g][v]
            out[name] = [entities[i][0][k] for i in rows_of[g]]
            if include_event_timestamps:
                out[f"{name}__ts"] = [entities[i][1] for i in rows_of[g]]
        return out


def _columns(entity_rows: Any) -> tuple[dict[str, list[Any]], int]:
    """The entity rows as columns (Feast takes both spellings), and how many rows."""
    if isinstance(entity_rows, dict) or isinstance(entity_rows, Mapping):  # dict first: the ABC check is slow
        columns = {}
        for k, v in entity_rows.items():
            if isinstance(v, (str, bytes)) or not isinstance(v, (Sequence, np.ndarray)):
                raise ReaderError(f"entity key {k!r}: expected a list of values, got {type(v).__name__}")
            columns[str(k)] = list(v)
    else:
        if not isinstance(entity_rows, Sequence) or isinstance(entity_rows, (str, bytes)):
            raise ReaderError(f"entity rows: expected a list of rows or a mapping of key to values, got "
                              f"{type(entity_rows).__name__}")
        rows = list(entity_rows)
        if not rows:
            raise ReaderError("no entity rows")
        if not all(isinstance(row, Mapping) for row in rows):
            raise ReaderError("entity rows: each row must be a mapping of join key to value")
        columns = {k: [] for k in rows[0]}
        for row in rows:
            if row.keys() != columns.keys():
                raise ReaderError(f"entity rows name different keys: {sorted(columns)} and {sorted(row)}")
            for k, value in row.items():
                columns[k].append(value)
    lengths = {len(v) for v in columns.values()}
    if len(lengths) != 1:
        raise ReaderError(f"entity keys have different numbers of values: {sorted(lengths)}")
    (count,) = lengths
    if not 0 < count <= MAX_ENTITIES:
        raise ReaderError(f"{count:,} entity rows: read 1 to {MAX_ENTITIES:,} per call")
    return columns, count


def _copy(proto: Any) -> Any:
    copied = type(proto)()
    copied.CopyFrom(proto)
    return copied


def _echoed(key: str, values: list[Any]) -> list[Any]:
    """A join key the request names but no requested view uses, as Feast echoes it: its
    type inferred from the values."""
    try:
        return [feast_value_type_to_python_type(v) for v in python_values_to_proto_values(values, ValueType.UNKNOWN)]
    except (TypeError, ValueError) as err:
        raise EntityKeyError(key, f"its values are not of one type Feast can read ({str(err)[:100]})") from None


def _key_values(key: str, values: list[Any], value_type: ValueType) -> list[Any]:
    """An entity key's values, each checked to be of the key's type, as Feast echoes them
    (a NumPy integer as a Python int)."""
    if value_type in INT_RANGE:
        low, high = INT_RANGE[value_type]
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
                raise EntityKeyError(key, f"{value!r} is not an {value_type.name.lower()}")
        return [int(v) for v in values]
    kind = str if value_type == ValueType.STRING else bytes
    for value in values:
        if not isinstance(value, kind):
            raise EntityKeyError(key, f"{value!r} is not {'a string' if kind is str else 'bytes'}")
    return [v if type(v) is kind else kind(v) for v in values]  # NumPy's str_ as str


# --- Feast's key encoding (entity key serialization version 3) -----------------------------
#
# Feast serializes an entity key through protobufs, about 15 us a key; the reader writes the
# same bytes directly: the count of join keys, each name (sorted) as type STRING, its length
# and UTF-8, then each value as its type, its length and its bytes; the project follows.
# _check_encoding compares with Feast's own `_redis_key` for every group it plans, so a
# Feast that encodes otherwise is refused rather than read wrong.

_ENCODERS = {
    ValueType.INT64: lambda v: _TYPE_LENGTH_INT64 + _INT64(v),
    ValueType.INT32: lambda v: _TYPE_LENGTH_INT32 + _INT32(v),
    ValueType.STRING: lambda v: _type_length(ValueType.STRING, len(b := v.encode())) + b,
    ValueType.BYTES: lambda v: _type_length(ValueType.BYTES, len(v)) + v,
}


def _type_length(value_type: ValueType, length: int) -> bytes:
    return _UINT32_PAIR(value_type.value, length)


_UINT32_PAIR = struct.Struct("<II").pack
_INT64, _INT32 = struct.Struct("<q").pack, struct.Struct("<i").pack
_TYPE_LENGTH_INT64, _TYPE_LENGTH_INT32 = _type_length(ValueType.INT64, 8), _type_length(ValueType.INT32, 4)


def _key_head(join_keys: tuple[str, ...]) -> bytes:
    parts = [struct.pack("<I", len(join_keys))]
    for name in join_keys:
        encoded = name.encode()
        parts.append(_type_length(ValueType.STRING, len(encoded)) + encoded)
    return b"".join(parts)


_SAMPLES = {ValueType.INT64: -(1 << 40) - 3, ValueType.INT32: -70_000, ValueType.STRING: "é-1", ValueType.BYTES: b"\x00k"}


def _check_encoding(group: _Group, key_types: Mapping[str, ValueType], project: str, version: int) -> None:
    values = [_SAMPLES[key_types[k]] for k in group.join_keys]
    ours = b"".join([group.head, *[_ENCODERS[key_types[k]](v) for k, v in zip(group.join_keys, values)],
                     project.encode()])
    protos = [python_values_to_proto_values([v], key_types[k])[0] for k, v in zip(group.join_keys, values)]
    # Feast sorts the keys itself: hand them over in another order to see it does.
    feasts = _redis_key(project, EntityKeyProto(join_keys=list(reversed(group.join_keys)),
                                                entity_values=list(reversed(protos))), version)
    if ours != feasts:
        raise ReaderError(f"Feast's key encoding for {', '.join(group.join_keys)} is not the one the reader "
                          "writes: this Feast version is not supported")


# The scalars whose Python value is the protobuf field itself: Feast's converter returns
# them as they are (unless the view declares a UUID, which Feast parses from a string).
_AS_STORED = frozenset({"int64_val", "int32_val", "double_val", "float_val", "string_val", "bytes_val", "bool_val"})
_PARSED_FROM_STRING = frozenset({ValueType.UUID, ValueType.TIME_UUID})


def _value(raw: bytes | None, kind: ValueType) -> Any:
    if not raw:
        return None  # Feast reads an absent field as an empty Value: None
    value = ValueProto.FromString(raw)
    which = value.WhichOneof("val")
    if which in _AS_STORED and kind not in _PARSED_FROM_STRING:
        return getattr(value, which)
    return feast_value_type_to_python_type(value, kind)


def _decode(reply: list[bytes | None], view: _View, timestamps: bool) -> tuple[list[Any], int]:
    """One entity's values for one view, and its event time in seconds as Feast reports it."""
    end = view.start + len(view.features)
    values = [_value(raw, kind) for raw, kind in zip(reply[view.start:end], view.types)]
    if not timestamps:
        return values, 0
    stamp = Timestamp()
    if reply[end]:
        stamp.ParseFromString(reply[end])
    # Feast goes through a datetime (seconds + nanos as a float) and back; so does this.
    moment = datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1_000_000_000.0, tz=timezone.utc)
    back = Timestamp()
    back.FromDatetime(moment)
    return values, back.seconds
