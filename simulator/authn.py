"""TokenReview and SubjectAccessReview for the simulated API server, so the watchdog's `auth.mode:
kubernetes` is tested against real HTTP answers without a real cluster.

Who exists and what they may do is given as data: a YAML file (`volcano-sim --authn FILE`), the JSON body
of `POST /sim/authn`, or in a test process `ApiServer.authn = Authn.from_config(...)`; with none, no token
is authenticated:

    users:                      # bearer token -> who it is
      tok-alice: {user: alice, groups: [team-a]}
      tok-old:   {user: bob, expired: true}     # reviewed as not authenticated, "token has expired"
      tok-narrow: {user: root, uid: "42", extra: {volcano-sim/scopes: [team-a]}}  # root's token, team-a only
    rules:                      # who may do what where (RBAC's additive rules, no denies)
      - group: team-a           # or user: alice
        namespaces: [team-a]    # "*": every namespace, and the cluster-wide question too
        verbs: [list, get]
        resources: [jobs.batch.volcano.sh]   # resource.group ("jobs" for the core group); "*": any

A SubjectAccessReview without a namespace asks about every namespace: only a rule with "*" allows it, as a
ClusterRoleBinding would. A token whose `extra` has `volcano-sim/scopes` is narrowed to those namespaces (never
the cluster-wide question), whatever its user's rules: a reviewer that drops `extra` sees the user's full
rights. `unavailable: true` makes both endpoints answer 500 (the watchdog must say 503).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(value)


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    expired: bool = False
    uid: str = ""
    # TokenReview's `extra`. The key SCOPES narrows the token to those namespaces, whatever the rules give its
    # user, as scoped tokens do on real clusters: the watchdog must hand `extra` back in its access reviews.
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


SCOPES = "volcano-sim/scopes"


@dataclass(frozen=True)
class Rule:
    users: tuple[str, ...]
    groups: tuple[str, ...]
    namespaces: tuple[str, ...]
    verbs: tuple[str, ...]
    resources: tuple[str, ...]

    def allows(self, user: str, groups: tuple[str, ...], namespace: str, verb: str, resource: str) -> bool:
        if user not in self.users and not set(groups) & set(self.groups):
            return False
        where = "*" in self.namespaces or (bool(namespace) and namespace in self.namespaces)
        return where and bool({"*", verb} & set(self.verbs)) and bool({"*", resource} & set(self.resources))


@dataclass
class Authn:
    users: dict[str, User] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    unavailable: bool = False
    token_reviews: int = 0
    access_reviews: int = 0

    @classmethod
    def from_config(cls, config: Any) -> Authn:
        """The `authn:` block (see the module's docstring); ValueError names what is wrong."""
        if config is None:
            return cls()
        if not isinstance(config, dict) or set(config) - {"users", "rules", "unavailable"}:
            raise ValueError("authn must be a mapping with users, rules (and unavailable)")
        users: dict[str, User] = {}
        for token, spec in (config.get("users") or {}).items():
            if not isinstance(spec, dict) or not isinstance(spec.get("user"), str) or not spec["user"]:
                raise ValueError(f"authn.users: the token's entry needs a user name (entry {len(users)})")
            extra = spec.get("extra") or {}
            if not isinstance(extra, dict):
                raise ValueError(f"authn.users: extra must be a mapping of lists (entry {len(users)})")
            users[str(token)] = User(spec["user"], _strings(spec.get("groups"), "authn.users groups"),
                                     bool(spec.get("expired", False)), str(spec.get("uid") or ""),
                                     tuple((str(k), _strings(v, "authn.users extra")) for k, v in extra.items()))
        rules = []
        for i, spec in enumerate(config.get("rules") or []):
            if not isinstance(spec, dict) or not (spec.get("user") or spec.get("group")):
                raise ValueError(f"authn.rules[{i}]: needs a user or a group")
            rules.append(Rule((spec["user"],) if spec.get("user") else (),
                              (spec["group"],) if spec.get("group") else (),
                              _strings(spec.get("namespaces"), f"authn.rules[{i}].namespaces"),
                              _strings(spec.get("verbs", ["*"]), f"authn.rules[{i}].verbs"),
                              _strings(spec.get("resources", ["*"]), f"authn.rules[{i}].resources")))
        return cls(users, rules, bool(config.get("unavailable", False)))

    def token_review(self, body: Any) -> tuple[int, dict[str, Any]]:
        self.token_reviews += 1
        spec = body.get("spec") if isinstance(body, dict) else None
        token = spec.get("token") if isinstance(spec, dict) else None
        if not isinstance(token, str):
            return 400, _status(400, "BadRequest", "TokenReview spec.token is required")
        user = self.users.get(token)
        if user is None or user.expired:
            status: dict[str, Any] = {"authenticated": False,
                                      "error": "token has expired" if user else "invalid bearer token"}
        else:
            status = {"authenticated": True, "user": {"username": user.name, "groups": list(user.groups),
                                                      **({"uid": user.uid} if user.uid else {}),
                                                      **({"extra": {k: list(v) for k, v in user.extra}}
                                                         if user.extra else {})}}
        return 201, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}, "status": status}

    def access_review(self, body: Any) -> tuple[int, dict[str, Any]]:
        self.access_reviews += 1
        spec = body.get("spec") if isinstance(body, dict) else None
        attrs = spec.get("resourceAttributes") if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or not isinstance(attrs, dict) or not isinstance(spec.get("user"), str):
            return 400, _status(400, "BadRequest", "SubjectAccessReview needs spec.user and spec.resourceAttributes")
        groups = tuple(g for g in spec.get("groups") or () if isinstance(g, str))
        group = str(attrs.get("group") or "")
        resource = f"{attrs.get('resource', '')}.{group}" if group else str(attrs.get("resource", ""))
        namespace = str(attrs.get("namespace") or "")
        extra = spec.get("extra")
        scopes = extra.get(SCOPES) if isinstance(extra, dict) else None
        allowed = (scopes is None or (isinstance(scopes, list) and bool(namespace) and namespace in scopes)) and any(
            rule.allows(spec["user"], groups, namespace, str(attrs.get("verb", "")), resource) for rule in self.rules)
        status = {"allowed": allowed} if allowed else {"allowed": False, "reason": "no rule allows it"}
        return 201, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "spec": spec, "status": status}


def load_authn(path: str | Path) -> Authn:
    """The users and rules of a YAML file; ValueError in one line naming the file."""
    try:
        return Authn.from_config(yaml.safe_load(Path(path).read_text()))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "reason": reason,
            "message": message}


def _json(obj: Any, status: int) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type="application/json")


def add_review_routes(app: web.Application, holder: Any) -> None:
    """The two review endpoints and `/sim/authn`, reading `holder.authn` at each request (so a test may
    replace it). Added before the generic /apis/ route, which would answer 404."""

    def review(kind: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            authn: Authn = holder.authn
            if authn.unavailable:
                return _json(_status(500, "InternalError", "injected fault: reviews unavailable"), 500)
            try:
                body = orjson.loads(await request.read())
            except orjson.JSONDecodeError:
                return _json(_status(400, "BadRequest", "body is not JSON"), 400)
            code, answer = authn.token_review(body) if kind == "token" else authn.access_review(body)
            return _json(answer, code)
        return handler

    async def configure(request: web.Request) -> web.Response:
        try:
            holder.authn = Authn.from_config(orjson.loads(await request.read()))
        except (ValueError, orjson.JSONDecodeError) as exc:
            return _json(_status(400, "BadRequest", str(exc)), 400)
        return _json({"users": len(holder.authn.users), "rules": len(holder.authn.rules)}, 200)

    app.router.add_post(TOKEN_REVIEWS, review("token"))
    app.router.add_post(ACCESS_REVIEWS, review("access"))
    app.router.add_post("/sim/authn", configure)
