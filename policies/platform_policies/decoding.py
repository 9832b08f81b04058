"""Decode each resource's properties once per request instead of once per rule.

pulumi-policy's analyzer turns a resource's property Struct into a dict, that dict into
Python values, and those into a read-only proxy that refuses values unknown at preview,
separately for every rule it runs (and again for the provider's properties): with 28
rules that work is most of the pack's time. The rules never modify what they read, so the
pack process shares one decoded copy, and one proxy of it, among them.

Results are kept per message object (the messages of one request keep their identity),
holding a reference to each message so its id cannot be reused while it is cached.

Decoding is also deferred until a rule reads the properties: most rules decide from the
resource type alone that they do not judge it, and some resources (a CRD's schema runs to
megabytes) no rule ever reads.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

# Enough for every resource of a large stack's AnalyzeStack request.
_LIMIT = 50_000


class _IdentityCache:
    """The analyzer serves requests on several threads. A lookup is one `dict.get`, atomic
    under the GIL (most calls are hits: 29 rules read each resource); adding an entry
    takes the lock."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, Any], tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key_obj: Any, extra: Any, compute: Any) -> Any:
        key = (id(key_obj), extra)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is key_obj:
            return hit[1]
        value = compute()
        with self._lock:
            self._entries[key] = (key_obj, value)
            if len(self._entries) > _LIMIT:  # the oldest first: dicts keep insertion order
                del self._entries[next(iter(self._entries))]
        return value


class _Deferred:
    """Deserialized properties, worked out the first time they are needed."""

    __slots__ = ("_compute", "_value", "_lock")

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._compute: Callable[[], Any] | None = compute
        self._value: Any = None
        self._lock = threading.Lock()

    def value(self) -> Any:
        with self._lock:
            if self._compute is not None:
                self._value, self._compute = self._compute(), None
            return self._value


class _LazyProxy(Mapping):
    """The read-only proxy of deferred properties: a Mapping, like the SDK's own proxy,
    that builds that proxy on first access."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._deferred = _Deferred(make)

    def __getitem__(self, key: Any) -> Any:
        return self._deferred.value()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._deferred.value())

    def __len__(self) -> int:
        return len(self._deferred.value())


# The analyzer's methods whose `MessageToDict(properties)` goes straight into
# `deserialize_properties` (Configure keeps its dict as the policies' config).
_DECODED_LATER = frozenset({"Analyze", "AnalyzeStack", "Remediate", "_get_provider_resource"})


def _value(props: Any) -> Any:
    return props.value() if isinstance(props, _Deferred) else props


def share_decoding_across_rules() -> None:
    """Install the shared decoding in pulumi-policy's analyzer (this process only)."""
    from google.protobuf import json_format
    from pulumi_policy import policy

    messages = _IdentityCache()
    values = _IdentityCache()
    proxies = _IdentityCache()
    to_dict = json_format.MessageToDict
    deserialize = policy.deserialize_properties
    make_proxy = policy.unknown_checking_proxy

    class _JsonFormat:
        """json_format as the analyzer sees it, with MessageToDict shared."""

        def __getattr__(self, name: str) -> Any:
            return getattr(json_format, name)

        @staticmethod
        def MessageToDict(message: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (protobuf's name)
            if args or kwargs:
                return to_dict(message, *args, **kwargs)
            if sys._getframe(1).f_code.co_name in _DECODED_LATER:
                # Even turning the Struct into a dict is deferred: for a CRD that is
                # megabytes no rule reads.
                return messages.get(message, None, lambda: _Deferred(lambda: to_dict(message)))
            return messages.get(message, None, lambda: to_dict(message))

    def deserialize_properties(props: Any, keep_unknowns: Any = None) -> Any:
        if keep_unknowns:  # remediation reads the decoded values itself: decode now
            return values.get(props, keep_unknowns, lambda: deserialize(_value(props), keep_unknowns))
        return values.get(props, keep_unknowns, lambda: _Deferred(lambda: deserialize(_value(props), keep_unknowns)))

    def unknown_checking_proxy(props: Any) -> Any:
        # The proxies only wrap: they hold no state of their own a rule could change.
        if isinstance(props, _Deferred):
            return proxies.get(props, None, lambda: _LazyProxy(lambda: make_proxy(props.value())))
        return proxies.get(props, None, lambda: make_proxy(props))

    policy.json_format = _JsonFormat()
    policy.deserialize_properties = deserialize_properties
    policy.unknown_checking_proxy = unknown_checking_proxy
