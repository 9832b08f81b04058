"""Run in `.venv-features` by tests/services/test_feature_reader.py: the online reader
(workloads/features/reader.py) returns what Feast's `get_online_features(...).to_dict()`
returns, for data Feast wrote, over every value type Feast 0.66 can write.

    python tests/services/feature_reader_check.py CONFIG guard refusals registry equivalence=EXAMPLES

The project (applied here): `customer` (an int64 key) with two views that share its Redis
key and between them hold one feature of each value type; `merchant` (a string key) with
one view; and one view keyed by both. Each Hypothesis example writes fresh entities through
Feast's own online store, each view of each entity present, absent, past its view's TTL or
with its Redis key expired, and each feature set or not; then reads a random list of
features for random rows (repeated entities, unused keys, both spellings of the rows) both
ways and compares the results exactly (NaN is equal to NaN; the columns' order counts)."""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml
from feast import Entity, FeatureService, FeatureStore, FeatureView, Field, FileSource, ValueType
from feast.infra.online_stores.helpers import _redis_key
from feast.protos.feast.types.EntityKey_pb2 import EntityKey
from feast.repo_config import RepoConfig
from feast.type_map import python_values_to_proto_values
from feast.types import VALUE_TYPES_TO_FEAST_TYPES, Array, Int64, String, Struct
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workloads.features import reader as online  # noqa: E402

V = ValueType
UTC = timezone.utc
NOW = datetime.now(UTC)
TTL = timedelta(days=1)

# --- a Python value of each type, as a writer hands it to Feast ---------------------------

_times = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
_zones = st.sampled_from([UTC, timezone(timedelta(hours=4)), timezone(-timedelta(hours=9, minutes=30)),
                          ZoneInfo("Asia/Dubai"), ZoneInfo("America/New_York")])
_json = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=6)
_map_values = st.one_of(st.integers(-1000, 1000), st.text(max_size=4), st.booleans(), st.floats(allow_nan=False))
SCALARS = {
    V.BYTES: st.binary(max_size=16), V.IMAGE_BYTES: st.binary(max_size=16), V.STRING: st.text(max_size=12),
    V.INT32: st.integers(-(1 << 31), (1 << 31) - 1), V.INT64: st.integers(-(1 << 63), (1 << 63) - 1),
    V.DOUBLE: st.floats(), V.FLOAT: st.floats(width=32), V.BOOL: st.booleans(), V.UNIX_TIMESTAMP: _times,
    V.UUID: st.uuids(), V.TIME_UUID: st.uuids(version=1),
    V.DECIMAL: st.decimals(min_value=-10**9, max_value=10**9, places=3, allow_nan=False, allow_infinity=False),
}
VALUES: dict[ValueType, st.SearchStrategy] = {**SCALARS}
for _name, _scalar in SCALARS.items():
    for _suffix, _collection in (("LIST", st.lists), ("SET", st.sets)):
        if f"{_name.name}_{_suffix}" in V.__members__:
            VALUES[V[f"{_name.name}_{_suffix}"]] = _collection(_scalar, max_size=4)
VALUES.update({
    V.JSON: _json, V.JSON_LIST: st.lists(st.dictionaries(st.text(max_size=4), _json, max_size=3), max_size=3),
    V.MAP: st.dictionaries(st.text(max_size=4), _map_values, max_size=3),
    V.MAP_LIST: st.lists(st.dictionaries(st.text(max_size=4), _map_values, max_size=3), max_size=3),
    V.SCALAR_MAP: st.dictionaries(st.integers(-100, 100), st.floats(allow_nan=False) | st.text(max_size=4), max_size=3),
    V.ZONED_TIMESTAMP: st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1), timezones=_zones),
    V.STRUCT: st.fixed_dictionaries({"a": st.integers(-1000, 1000), "b": st.text(max_size=4)}),
    V.VALUE_LIST: st.lists(st.lists(st.integers(-1000, 1000), max_size=3), max_size=3),
})
VALUES[V.STRUCT_LIST] = st.lists(VALUES[V.STRUCT], max_size=3)
_STRUCT = Struct({"a": Int64, "b": String})
DTYPES = {**VALUE_TYPES_TO_FEAST_TYPES, V.STRUCT: _STRUCT, V.STRUCT_LIST: Array(_STRUCT),
          V.VALUE_LIST: Array(Array(Int64))}
# Every type Feast has but these: UNKNOWN and NULL are no feature's type, PDF_BYTES has no
# writer in Feast 0.66 (python_values_to_proto_values refuses it), VALUE_SET no Feast type.
NOT_WRITABLE = {V.UNKNOWN, V.NULL, V.PDF_BYTES, V.VALUE_SET}
TYPES = [t for t in V if t not in NOT_WRITABLE]
assert set(TYPES) <= set(VALUES) and set(TYPES) <= set(DTYPES), set(TYPES) - set(VALUES) - set(DTYPES)


def feature_name(prefix: str, value_type: ValueType) -> str:
    return f"{prefix}_{value_type.name.lower()}"


# --- the project ----------------------------------------------------------------------------

customer = Entity(name="customer", join_keys=["customer_id"], value_type=V.INT64)
merchant = Entity(name="merchant", join_keys=["merchant_id"], value_type=V.STRING)
device = Entity(name="device", join_keys=["device_id"], value_type=V.BYTES)
shop = Entity(name="shop", join_keys=["shop_id"], value_type=V.INT32)
KEY_TYPES = {"customer_id": V.INT64, "merchant_id": V.STRING, "device_id": V.BYTES, "shop_id": V.INT32}


def _view(name: str, entities: list[Entity], types: list[ValueType], prefix: str) -> FeatureView:
    return FeatureView(name=name, entities=entities, ttl=TTL,
                       schema=[Field(name=feature_name(prefix, t), dtype=DTYPES[t]) for t in types],
                       source=FileSource(path=f"s3://datasets/features/research/reader/{name}.parquet",
                                         timestamp_field="event_timestamp"))


HALF = len(TYPES) // 2
VIEWS = [_view("typed_a", [customer], TYPES[:HALF], "a"), _view("typed_b", [customer], TYPES[HALF:], "b"),
         _view("merchant_stats", [merchant], [V.DOUBLE, V.STRING_LIST], "m"),
         _view("pair_stats", [customer, merchant], [V.INT64, V.BOOL], "p"),
         _view("device_stats", [device], [V.FLOAT], "d"), _view("shop_stats", [shop, device], [V.INT32], "s")]
TYPES_OF = {v.name: {f.name: f.dtype.to_value_type() for f in v.features} for v in VIEWS}
REFS = [f"{v.name}:{f.name}" for v in VIEWS for f in v.features]


def store_for(config: str) -> FeatureStore:
    data = yaml.safe_load(Path(config).read_text())
    return FeatureStore(config=RepoConfig(repo_path=Path(config).parent, **data))


# --- comparing results ----------------------------------------------------------------------

def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN and types compared too (1 is not True, 1.0 not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):  # sets of floats: NaN members match by repr
        return sorted(map(repr, a)) == sorted(map(repr, b))
    return a == b


# --- the property ---------------------------------------------------------------------------

STATES = ("absent", "present", "old", "expired")
_ids = itertools.count(1)


def equivalence(store: FeatureStore, reader: online.FeatureReader, examples: int) -> None:
    provider = store._get_provider()
    client = provider.online_store._get_client(store.config.online_store)
    views = {v.name: store.get_feature_view(v.name) for v in VIEWS}

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        count = data.draw(st.integers(1, 5), label="entities")
        customers = [next(_ids) * 1000 + data.draw(st.integers(0, 999)) for _ in range(count)]
        value = {"customer_id": customers, "shop_id": [c % (1 << 31) for c in customers],
                 "merchant_id": data.draw(st.lists(st.text(max_size=6), min_size=count, max_size=count, unique=True)),
                 "device_id": data.draw(st.lists(st.binary(min_size=1, max_size=6), min_size=count, max_size=count, unique=True)),
                 "note": ["x"] * count}
        expire = []
        for name, view in views.items():
            keys = [k for k in KEY_TYPES if k in {c.name for c in view.entity_columns}]
            rows = []
            for i in range(count):
                state = data.draw(st.sampled_from(STATES), label=f"{name}[{i}]")
                if state == "absent":
                    continue
                values = {}
                for feature, value_type in TYPES_OF[name].items():
                    drawn = data.draw(st.none() | VALUES[value_type], label=feature)
                    if drawn is None:
                        continue  # this feature not set for this entity
                    try:
                        (values[feature],) = python_values_to_proto_values([drawn], value_type)
                    except Exception:  # a value Feast itself cannot write
                        reject()
                age = data.draw(st.integers(0, 3600), label="age") if state != "old" else 30 * 86400
                stamp = NOW - timedelta(seconds=age, microseconds=data.draw(st.integers(0, 999_999)))
                key = EntityKey(join_keys=keys, entity_values=[
                    python_values_to_proto_values([value[k][i]], KEY_TYPES[k])[0] for k in keys])
                rows.append((key, values, stamp, None))
                if state == "expired":
                    expire.append(_redis_key(store.project, key, store.config.entity_key_serialization_version))
            if rows:
                provider.online_store.online_write_batch(store.config, view, rows, None)
        for key in expire:  # Redis drops the key: what key_ttl_seconds does in time
            client.pexpire(key, 1)
        if expire:
            time.sleep(0.005)

        features = data.draw(st.lists(st.sampled_from(REFS), min_size=1, max_size=8, unique=True), label="features")
        picks = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=8), label="rows")
        needed = {k for ref in features for k in
                  [c.name for c in views[ref.split(":")[0]].entity_columns]}
        keys = sorted(needed | set(data.draw(st.sets(st.sampled_from([*KEY_TYPES, "note"])))))
        rows = [{k: value[k][p] for k in keys} for p in picks]
        entity_rows = rows if data.draw(st.booleans(), label="rows as dicts") else {
            k: [r[k] for r in rows] for k in keys}
        full = data.draw(st.booleans(), label="full_feature_names")
        stamps = data.draw(st.booleans(), label="include_event_timestamps")
        expected = store.get_online_features(features, entity_rows, full_feature_names=full).to_dict(
            include_event_timestamps=stamps)
        got = reader.read(features, entity_rows, full_feature_names=full, include_event_timestamps=stamps)
        assert same(got, expected), f"reader {got!r}\n   feast {expected!r}"

    check()


# --- refusals: typed errors that name the view, the feature or the key -------------------

def refused(reader: online.FeatureReader, kind: type, features: Any, rows: Any, *names: str) -> None:
    """The read raises `kind`, and its message names each of `names`."""
    try:
        reader.read(features, rows)
    except kind as err:
        assert all(n in str(err) for n in names), (str(err), names)
        return
    raise AssertionError(f"{features} {rows!r}: not refused with {kind.__name__}")


def refusals(reader: online.FeatureReader) -> None:
    refused_here = functools.partial(refused, reader)
    ids = {"customer_id": [1]}
    refused_here(online.UnknownFeatureView, ["nope:x"], ids, "nope")
    refused_here(online.UnknownFeature, ["typed_a:nope"], ids, "typed_a", "nope")
    refused_here(online.ReaderError, ["typed_a"], ids, "typed_a")
    for wrong in ("1", 1.5, True, None, 1 << 63, b"1"):
        refused_here(online.EntityKeyError, ["typed_a:a_int64"], {"customer_id": [wrong]}, "customer_id", repr(wrong))
    for wrong in (7, b"m", None):
        refused_here(online.EntityKeyError, ["merchant_stats:m_double"], {"merchant_id": [wrong]}, "merchant_id")
    refused_here(online.EntityKeyError, ["pair_stats:p_int64"], {"customer_id": [1]}, "merchant_id")
    refused_here(online.ReaderError, ["typed_a:a_int64"], {"customer_id": [1, 2], "merchant_id": ["m"]}, "numbers")
    refused_here(online.ReaderError, ["typed_a:a_int64"], [], "no entity rows")
    refused_here(online.ReaderError, [], ids, "non-empty list")
    refused_here(online.ReaderError, "typed_a:a_int64", ids, "non-empty list")
    refused_here(online.ReaderError, ["typed_a:a_int64"], {"customer_id": 5}, "customer_id", "list of values")
    refused_here(online.ReaderError, ["typed_a:a_int64"], ["customer_id"], "mapping")
    refused_here(online.ReaderError, ["typed_a:a_int64"], 5, "int")
    refused_here(online.ReaderError, ["typed_a:a_int64", "typed_a:a_int64"], ids, "a_int64")
    refused_here(online.ReaderError, [["typed_a:a_int64"]], ids, "non-empty list")
    # A key no requested view uses is echoed with its type inferred, as Feast does; one it cannot infer:
    refused_here(online.EntityKeyError, ["typed_a:a_int64"], {"customer_id": [1, 2], "merchant_id": [7, "m"]},
            "merchant_id")
    refused_here(online.EntityKeyError, ["merchant_stats:m_double"], {"merchant_id": ["\ud800"]}, "merchant_id", "UTF-8")
    refused_here(online.ReaderError, ["typed_a:a_int64"], {"customer_id": list(range(online.MAX_ENTITIES + 1))},
            "10,001")


# --- the registry: a view applied after the reader started is read after a refresh ---------

def registry(config: str, reader: online.FeatureReader) -> None:
    """Another process's `apply` (here: another FeatureStore, with its own registry cache)."""
    other = store_for(config)
    late = _view("late_view", [customer], [V.INT64], "late")
    refused(reader, online.UnknownFeatureView, ["late_view:late_int64"], {"customer_id": [1]}, "late_view")  # not applied yet
    other.apply([late])
    reader.refresh()
    assert reader.read(["late_view:late_int64"], {"customer_id": [1]}) == {"customer_id": [1], "late_int64": [None]}
    # Removed again: a plan in use is dropped at the refresh, and the next read names the view.
    other.delete_feature_view("late_view")
    reader.refresh()
    refused(reader, online.UnknownFeatureView, ["late_view:late_int64"], {"customer_id": [1]}, "late_view")
    # The same, applied and removed through the reader's own store: Feast changes its cached
    # registry in place then, which the reader must still see as a change.
    reader.store.apply([late])
    reader.refresh()
    assert reader.read(["late_view:late_int64"], {"customer_id": [1]})["late_int64"] == [None]
    reader.store.delete_feature_view("late_view")
    reader.refresh()
    refused(reader, online.UnknownFeatureView, ["late_view:late_int64"], {"customer_id": [1]}, "late_view")
    # A refresh that lands while a read plans its list: the plan of the older registry is used
    # for that read alone, never kept.
    other.apply([late])
    reader.refresh()
    planning = reader._resolve

    def refreshed_meanwhile(*key):
        plan = planning(*key)
        other.delete_feature_view("late_view")
        reader.refresh()
        return plan

    reader._resolve = refreshed_meanwhile
    try:
        reader.read(["late_view:late_int64"], {"customer_id": [1]})
    finally:
        reader._resolve = planning
    refused(reader, online.UnknownFeatureView, ["late_view:late_int64"], {"customer_id": [1]}, "late_view")  # the plan was not kept
    # A feature service is read as Feast reads it: its views' projections, in its order.
    service = FeatureService(name="reader_service", features=[VIEWS[1][[feature_name("b", TYPES[HALF])]], VIEWS[2]])
    reader.store.apply([service])
    rows = {"customer_id": [1, 2], "merchant_id": ["m", "n"]}
    expected = reader.store.get_online_features(reader.store.get_feature_service("reader_service"), rows).to_dict()
    got = reader.read(reader.store.get_feature_service("reader_service"), rows)
    assert same(got, expected), (got, expected)


# --- the upgrade guard: Feast's key layout, as the reader and every running reader rely on ---
#
# The reader calls Feast's own encoders, so it follows a Feast upgrade; but keys written by
# the running version would no longer be found by the upgraded one, and a layout Feast
# changed is a change to review. Worked out for Feast 0.66.0 (entity key serialization v3):
# the key is the entity key (its join keys sorted, each a length-prefixed name, then each
# value's type, length and bytes) followed by the project; each feature is a field named
# by murmur3 of "<view>:<feature>", beside the field "_ts:<view>".
GOLDEN_KEY = bytes.fromhex("01000000020000000b000000637573746f6d65725f69640400000008000000070000000000000072657365"
                           "61726368")
GOLDEN_PAIR_KEY = bytes.fromhex(
    "02000000020000000b000000637573746f6d65725f6964020000000b0000006d65726368616e745f696404000000080000000700000000"
    "00000002000000030000006d2d317265736561726368")
GOLDEN_FIELD = bytes.fromhex("158e0e7d")  # murmur3 of "guard_view:spend"


def guard(store: FeatureStore) -> None:
    import feast
    from feast.protos.feast.types.Value_pb2 import Value

    pinned = next(line.split("==")[1].split()[0] for line in (Path(__file__).parents[2] / "Makefile").read_text()
                  .splitlines() if line.startswith("FEATURES_PINS"))
    assert feast.__version__ == pinned, f"Feast {feast.__version__} is installed, the Makefile pins {pinned}"
    assert store.config.project == "research" and store.config.entity_key_serialization_version == 3
    source = FileSource(path="s3://datasets/features/research/reader/guard.parquet", timestamp_field="event_timestamp")
    view = FeatureView(name="guard_view", entities=[customer], ttl=TTL,
                       schema=[Field(name="spend", dtype=DTYPES[V.DOUBLE])], source=source)
    pair = FeatureView(name="guard_pair", entities=[merchant, customer], ttl=TTL,
                       schema=[Field(name="seen", dtype=DTYPES[V.BOOL])], source=source)
    store.apply([view, pair])
    provider = store._get_provider()
    stamp = datetime(2026, 11, 20, 12, tzinfo=UTC)
    customer_7 = Value(int64_val=7)
    provider.online_store.online_write_batch(store.config, store.get_feature_view("guard_view"), [(
        EntityKey(join_keys=["customer_id"], entity_values=[customer_7]), {"spend": Value(double_val=1.5)}, stamp,
        None)], None)
    provider.online_store.online_write_batch(store.config, store.get_feature_view("guard_pair"), [(
        EntityKey(join_keys=["merchant_id", "customer_id"], entity_values=[Value(string_val="m-1"), customer_7]),
        {"seen": Value(bool_val=True)}, stamp, None)], None)
    client = provider.online_store._get_client(store.config.online_store)
    written = client.hgetall(GOLDEN_KEY)
    assert {GOLDEN_FIELD, b"_ts:guard_view"} <= set(written), f"Feast wrote {written!r} under the golden key"
    assert Value.FromString(written[GOLDEN_FIELD]).double_val == 1.5
    assert set(client.hgetall(GOLDEN_PAIR_KEY)) >= {b"_ts:guard_pair"}, "the two-key entity is not where it was"


def main() -> int:
    """Each check named on the command line, in order; one JSON line each, a failure's
    traceback included, so one failing check does not hide the others."""
    import traceback

    config, checks = sys.argv[1], sys.argv[2:]
    store = store_for(config)
    if not {v.name for v in store.list_feature_views()} >= {v.name for v in VIEWS}:
        store.apply([customer, merchant, device, shop, *VIEWS])
    failed = 0
    with online.FeatureReader(store, refresh_seconds=3600) as reader:
        for what in checks:
            name, _, examples = what.partition("=")
            started = time.monotonic()
            try:
                {"equivalence": lambda: equivalence(store, reader, int(examples)),
                 "refusals": lambda: refusals(reader), "registry": lambda: registry(config, reader),
                 "guard": lambda: guard(store)}[name]()
            except Exception:  # noqa: BLE001 - reported, and the exit code says so
                failed += 1
                print(json.dumps({"check": name, "ok": False, "error": traceback.format_exc()[-6000:]}), flush=True)
                continue
            print(json.dumps({"check": name, "ok": True, "types": len(TYPES), "examples": int(examples or 0),
                              "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("FEAST_USAGE", "False")
    sys.exit(main())
