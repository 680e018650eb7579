"""Who a caller is and what it may do, asked of the API server as kube-rbac-proxy asks it: a TokenReview
(authentication.k8s.io/v1) turns a bearer token into a user and groups, a SubjectAccessReview
(authorization.k8s.io/v1) says whether that user may `list` a resource in a namespace. Both answers are
kept for a short time (`ttl`), keyed by the token's SHA-256 (the token itself is never kept) and by
(user, groups, namespace), so a page that shows twenty namespaces costs the API server nothing on the
next click; failures are not kept, so a recovered API server answers at once.

An API server that cannot be reached, refuses the review itself (the watchdog lacks RBAC `create` on
tokenreviews / subjectaccessreviews) or answers nonsense raises `ReviewUnavailable`: the caller answers
503, never "not allowed" (which would look like the user's fault) and never "allowed".
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes import client

from volcano_monitor.core.kube.rest import ApiUnavailable, request_json, to_object

__all__ = ["Identity", "ReviewUnavailable", "Reviews", "Scope", "TtlCache", "every_namespace", "token_key", "visible"]

# The namespaces a caller may see: None is every one (auth.mode token, or a caller allowed cluster-wide). The
# watchdog's routes in every layer take it as a FastAPI dependency they are handed (`every_namespace` unless
# the views give them theirs), so the type lives here, below all of them.
Scope = Set[str] | None


def every_namespace() -> Scope:
    """The scope of auth.mode token: everything, at no cost."""
    return None


def visible(scope: Scope, namespace: str | None) -> bool:
    """Whether an item of `namespace` may be shown (one of no namespace only to a cluster-wide caller)."""
    return scope is None or (bool(namespace) and namespace in scope)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

K = TypeVar("K")
V = TypeVar("V")


class ReviewUnavailable(Exception):
    """The API server could not answer a review; the message names no token."""


@dataclass(frozen=True)
class Identity:
    """A caller as the API server knows it (the groups sorted, so equal callers share cache entries)."""

    user: str
    groups: tuple[str, ...] = ()
    # What TokenReview also says of a token and SubjectAccessReview must be told back (as kube-rbac-proxy
    # does): a token narrowed through `extra` (scoped tokens) is otherwise judged with its user's full rights.
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, user: str, groups: Any = (), uid: Any = "", extra: Any = None) -> Identity:
        pairs = extra.items() if isinstance(extra, dict) else ()
        return cls(user, tuple(sorted({str(g) for g in groups or () if str(g)})), uid if isinstance(uid, str) else "",
                   tuple(sorted((str(k), tuple(str(v) for v in values)) for k, values in pairs
                                if isinstance(values, list))))


class TtlCache(Generic[K, V]):
    """Answers kept `ttl` seconds, at most `size` of them (the oldest go first). Thread-safe: FastAPI runs
    sync dependencies on a thread pool."""

    def __init__(self, ttl: float, size: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: K) -> tuple[bool, V | None]:
        """(found, value); an expired entry is not found."""
        with self._lock:
            item = self._items.get(key)
            if item is None or item[0] <= self.clock():
                if item is not None:
                    del self._items[key]
                self.misses += 1
                return False, None
            self.hits += 1
            return True, item[1]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = (self.clock() + self.ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def token_key(token: str) -> str:
    """What the cache keeps of a token: its SHA-256, so a heap dump holds no credential."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


class Reviews:
    """TokenReview and SubjectAccessReview through the raw JSON client, with their answers cached."""

    def __init__(self, api: client.ApiClient, *, ttl: float = 30.0, verb: str = "list",
                 group: str = "batch.volcano.sh", resource: str = "jobs", timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.verb, self.group, self.resource, self.timeout = api, verb, group, resource, timeout
        self.tokens: TtlCache[str, Identity | None] = TtlCache(ttl, clock=clock)
        self.access: TtlCache[tuple[Identity, str], bool] = TtlCache(ttl, clock=clock)
        self.calls = 0  # reviews sent to the API server (tests and /metrics count the cache's worth)

    def _create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        try:
            status, answer = request_json(self.api, "POST", path, body, timeout=self.timeout)
        except ApiUnavailable as exc:
            raise ReviewUnavailable(f"{body['kind']}: the API server did not answer") from exc
        if status not in (200, 201) or not isinstance(answer, dict) or not isinstance(answer.get("status"), dict):
            raise ReviewUnavailable(f"{body['kind']}: the API server answered {status}")
        return to_object(answer["status"])

    def authenticate(self, token: str) -> Identity | None:
        """The token's user and groups, or None when the API server does not accept it (unknown, expired,
        malformed). Raises `ReviewUnavailable`."""
        key = token_key(token)
        found, identity = self.tokens.get(key)
        if found:
            return identity
        status = self._create(TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                              "spec": {"token": token}})
        user = to_object(status.get("user"))
        name = user.get("username")
        identity = (Identity.of(name, user.get("groups") if isinstance(user.get("groups"), list) else (),
                                user.get("uid", ""), user.get("extra"))
                    if status.get("authenticated") is True and isinstance(name, str) and name else None)
        self.tokens.put(key, identity)
        return identity

    def allowed(self, who: Identity, namespace: str) -> bool:
        """Whether `who` may `verb` the resource in `namespace` ("" asks about every namespace at once).
        Raises `ReviewUnavailable`."""
        key = (who, namespace)
        found, answer = self.access.get(key)
        if found:
            return bool(answer)
        attributes = {"verb": self.verb, "group": self.group, "resource": self.resource}
        if namespace:
            attributes["namespace"] = namespace
        status = self._create(ACCESS_REVIEWS, {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": who.user, "groups": list(who.groups), "resourceAttributes": attributes,
                     **({"uid": who.uid} if who.uid else {}),
                     **({"extra": {k: list(v) for k, v in who.extra}} if who.extra else {})}})
        allowed = status.get("allowed") is True and status.get("denied") is not True
        self.access.put(key, allowed)
        return allowed
