"""The capability controller: keeps each configured Queue's `spec.capability` where its policy says,
within the guardrails, and records why.

It owns informers for nodes and queues (and, for demand policies, Volcano pods and PodGroups, to count
pending demand). A change that moves a share (a node joins, leaves, changes allocatable or is cordoned;
a queue appears or its capability or parent changes) triggers a reconcile after `debounce_seconds`; a
reconcile also runs every `reconcile_interval_seconds`, and when this replica becomes the leader.

Every replica plans (so any replica's API and /metrics can show the plan), but only the leader writes:
the plan and the audit trail to the database, and, in apply mode, the Queue patch (guarded by the
Queue's resourceVersion; on 409 it re-reads, re-plans and retries a bounded number of times), a
Kubernetes Event on the Queue, and `announce(change)` for the chat notice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.kube.leaderelection import Leadership
from volcano_monitor.core.kube.resources import NODES, PODGROUPS, PODS, QUEUES
from volcano_monitor.core.kube.rest import ApiUnavailable
from volcano_monitor.core.model import (
    Node,
    Pod,
    PodGroup,
    Queue,
    parse_node,
    parse_pod,
    parse_podgroup,
    parse_queue,
    res_dict,
)
from volcano_monitor.core.podview import is_volcano_pod
from volcano_monitor.watchdog.actions.capability import kube, store
from volcano_monitor.watchdog.actions.capability.guardrails import (
    Limits,
    QueuePlan,
    format_quantity,
    hierarchy_order,
    parent_limits,
    plan_queue,
)
from volcano_monitor.watchdog.actions.capability.policy import Target, demand_target, pending_requests, share_target
from volcano_monitor.watchdog.actions.capability.settings import CapabilitySettings, QueuePolicy
from volcano_monitor.watchdog.actions.capability.store import APPLIED, DRY_RUN, CapabilityChange
from volcano_monitor.watchdog.actions.controlloop import ControlLoop

log = logging.getLogger(__name__)

OUTCOMES = (APPLIED, DRY_RUN, "unchanged", "held", "conflict", "failed")
STANDBY = "standby"  # a follower's plan in apply mode: not acted on, not counted


class CapabilityController(ControlLoop):
    thread_name = "capability"

    def __init__(self, settings: CapabilitySettings, engine: Engine, api: client.ApiClient, leader: Leadership,
                 clock: Callable[[], float] = time.time,
                 announce: Callable[[CapabilityChange], None] | None = None, *,
                 namespaces: Sequence[str] = (), informer_backoff: tuple[float, float] = (0.5, 30.0)) -> None:
        super().__init__(api, leader, informer_backoff)
        self.settings = settings
        self.engine = engine
        self.clock = clock
        self.announce = announce
        self.limits = Limits.of(settings)
        self._reconcile_lock = threading.Lock()
        self._lock = threading.Lock()  # the caches below and the outputs (status, targets, counts)
        self._nodes: dict[str, Node] = {}
        self._node_keys: dict[str, tuple[Any, ...]] = {}
        self._queues: dict[str, Queue] = {}
        self._pending: dict[tuple[str, str], Pod] = {}  # Pending pods no node holds yet
        self._group_queues: dict[tuple[str, str], str] = {}
        self._status: dict[str, dict[str, Any]] = {}
        self._targets: dict[str, dict[str, float]] = {}
        self._counts: Counter[tuple[str, str]] = Counter()
        self._last_applied: dict[str, float] = {}  # fallback for the cooldown when the database write failed
        self.node_informer = self.informer(NODES, parse_node, self._on_node)
        self.queue_informer = self.informer(QUEUES, parse_queue, self._on_queue)
        if any(p.demand is not None for p in settings.policies.values()):  # pending demand needs pods
            scopes: list[str | None] = list(namespaces) or [None]
            for namespace in scopes:
                self.informer(PODS, parse_pod, self._on_pod, namespace, is_volcano_pod)
                self.informer(PODGROUPS, parse_podgroup, self._on_podgroup, namespace)

    # ---- informer handlers (informer threads) --------------------------------------------------------------

    def _on_node(self, event_type: str, node: Node) -> None:
        key = (tuple(sorted(node.labels.items())), node.allocatable, node.ready, node.unschedulable)
        with self._lock:
            if event_type == DELETED:
                self._nodes.pop(node.name, None)
                changed = self._node_keys.pop(node.name, None) is not None
            else:
                self._nodes[node.name] = node
                changed = self._node_keys.get(node.name) != key  # heartbeats alone change nothing
                self._node_keys[node.name] = key
        if changed:
            self._trigger.set()

    def _on_queue(self, event_type: str, queue: Queue) -> None:
        with self._lock:
            before = self._queues.pop(queue.name, None)
            if event_type != DELETED:
                self._queues[queue.name] = queue
        if before is None or event_type == DELETED or (before.capability, before.parent) != (
                queue.capability, queue.parent):
            self._trigger.set()

    def _on_pod(self, event_type: str, pod: Pod) -> None:
        key = (pod.namespace, pod.name)
        with self._lock:
            if event_type != DELETED and pod.phase == "Pending" and not pod.node_name:
                self._pending[key] = pod
            else:
                self._pending.pop(key, None)

    def _on_podgroup(self, event_type: str, group: PodGroup) -> None:
        with self._lock:
            if event_type == DELETED:
                self._group_queues.pop((group.namespace, group.name), None)
            else:
                self._group_queues[(group.namespace, group.name)] = group.queue

    def interval_seconds(self) -> float:
        return self.settings.reconcile_interval_seconds

    def debounce_seconds(self) -> float:
        return self.settings.debounce_seconds

    # ---- reconcile ---------------------------------------------------------------------------------------

    def reconcile(self) -> dict[str, str]:
        """Plan every configured queue (parents before children) and act on the plans; queue -> outcome.
        Nothing is planned before every informer has listed once: an empty node cache would read as a
        cluster without nodes and lower every share to its allocation."""
        if not all(made.synced.is_set() for made in self.informers):
            log.info("capability: informers not synced yet; reconcile skipped")
            return {}
        with self._reconcile_lock:
            now = self.clock()
            leading = self.leader.is_leader()
            with self._lock:
                nodes = list(self._nodes.values())
                queues = dict(self._queues)
                pending = list(self._pending.values())
                groups = dict(self._group_queues)
            parents = {name: q.parent for name, q in queues.items()}
            capabilities = {name: res_dict(q.capability) for name, q in queues.items()}
            planned: dict[str, dict[str, float]] = {}
            outcomes: dict[str, str] = {}
            for name in hierarchy_order(self.settings.policies, parents):
                policy = self.settings.policies[name]
                queue = queues.get(name)
                if queue is None:
                    with self._lock:
                        self._status[name] = {"queue": name, "policy": policy.kind, "outcome": "missing",
                                              "error": "no such queue", "resources": {}}
                    continue
                try:
                    with Session(self.engine) as session:
                        target = self._target(session, name, policy, nodes, pending, groups, now)
                    outcome = self._reconcile_queue(queue, target, capabilities, planned, now, leading)
                except (SQLAlchemyError, ApiUnavailable, kube.PatchFailed) as exc:
                    log.warning("capability: queue %s: %s: %s", name, type(exc).__name__, str(exc).splitlines()[0])
                    outcome = "failed"
                    self._count(name, outcome, leading)
                outcomes[name] = outcome
            return outcomes

    def _target(self, session: Session, name: str, policy: QueuePolicy, nodes: list[Node], pending: list[Pod],
                groups: dict[tuple[str, str], str], now: float) -> Target:
        if policy.share is not None:
            return share_target(policy.share, nodes)
        assert policy.demand is not None
        until = datetime.fromtimestamp(now, UTC)
        since = datetime.fromtimestamp(now - policy.demand.window_seconds, UTC)
        buckets = store.usage_buckets(session, name, since, until)
        return demand_target(policy.demand, buckets, pending_requests(pending, name, groups))

    def _cooldown_left(self, name: str, now: float) -> float:
        if self.limits.cooldown_seconds <= 0:
            return 0.0
        with Session(self.engine) as session:
            stored = store.last_applied_at(session, name)
        last = max(stored.timestamp() if stored else 0.0, self._last_applied.get(name, 0.0))
        return max(0.0, last + self.limits.cooldown_seconds - now) if last else 0.0

    def _plan(self, queue: Queue, target: Target, capabilities: dict[str, dict[str, float]],
              planned: dict[str, dict[str, float]], cooldown_left: float) -> QueuePlan:
        plan = plan_queue(queue.name, target, res_dict(queue.capability), res_dict(queue.allocated),
                          parent_limits(queue.parent, planned, capabilities), self.limits, cooldown_left)
        planned[queue.name] = {r: p.planned for r, p in plan.resources.items() if p.planned is not None}
        return plan

    def _reconcile_queue(self, queue: Queue, target: Target, capabilities: dict[str, dict[str, float]],
                         planned: dict[str, dict[str, float]], now: float, leading: bool) -> str:
        cooldown_left = self._cooldown_left(queue.name, now)
        plan = self._plan(queue, target, capabilities, planned, cooldown_left)
        verdict = plan.verdict
        outcome: str
        if verdict != "change":
            outcome = verdict
        elif self.settings.mode == "dry-run":
            outcome = DRY_RUN
            if leading:
                self._record_dry_run(queue, plan, now)
        elif not leading:
            outcome = STANDBY
        else:
            outcome, plan = self._apply(queue, plan, target, capabilities, planned, cooldown_left, now)
        self._count(queue.name, outcome, leading)
        self._publish(plan, outcome, now, leading)
        return outcome

    def _apply(self, queue: Queue, plan: QueuePlan, target: Target, capabilities: dict[str, dict[str, float]],
               planned: dict[str, dict[str, float]], cooldown_left: float, now: float) -> tuple[str, QueuePlan]:
        """Patch, guarded by the resourceVersion the plan was made from; on 409 re-read and re-plan."""
        for _ in range(self.settings.conflict_retries + 1):
            if not self.leader.is_leader():
                return STANDBY, plan  # lost the lease meanwhile: the new leader plans for itself
            result = kube.patch_capability(self.api, queue, plan.changes)
            if result is not None:
                self._record_applied(queue, result, plan, now)
                return APPLIED, plan
            self._count(queue.name, "conflict", True)
            log.info("capability: queue %s changed under the patch (409); re-reading and re-planning", queue.name)
            fresh = kube.get_queue(self.api, queue.name)
            if fresh is None:
                return "failed", plan
            queue = fresh
            capabilities[queue.name] = res_dict(queue.capability)
            plan = self._plan(queue, target, capabilities, planned, cooldown_left)
            if plan.verdict != "change":
                return plan.verdict, plan
        log.warning("capability: queue %s kept changing under %d patches; giving up this round", queue.name,
                    self.settings.conflict_retries + 1)
        return "failed", plan

    # ---- records -----------------------------------------------------------------------------------------

    def _change(self, queue: Queue, plan: QueuePlan, outcome: str, now: float, resource_version: str = "",
                ) -> CapabilityChange:
        changes = plan.changes
        current = res_dict(queue.capability)
        return CapabilityChange(
            queue=queue.name, policy=plan.policy, mode=self.settings.mode, outcome=outcome,
            before={r: current.get(r) for r in sorted(changes)}, after=dict(sorted(changes.items())),
            why={r: plan.resources[r].why for r in sorted(changes)}, at=datetime.fromtimestamp(now, UTC),
            inputs=plan.inputs, resource_version=resource_version, identity=self.leader.identity)

    def _record_applied(self, before: Queue, after: Queue, plan: QueuePlan, now: float) -> None:
        change = self._change(before, plan, APPLIED, now, after.resource_version)
        self._last_applied[before.name] = now
        try:
            with Session(self.engine) as session, session.begin():
                change = _with_id(change, store.record_change(session, change))
        except SQLAlchemyError as exc:  # the Queue is patched; the Event and the notice still tell
            log.error("capability: queue %s was patched but the change could not be recorded: %s", before.name,
                      str(exc).splitlines()[0])
        kube.queue_event(self.api, self.settings.event_namespace, after, "CapabilityUpdated", describe(change),
                         self.leader.identity, now)
        self._announce(change)

    def _record_dry_run(self, queue: Queue, plan: QueuePlan, now: float) -> None:
        """Record a dry-run plan once: again only when what it would change differs from the last record."""
        change = self._change(queue, plan, DRY_RUN, now)
        with Session(self.engine) as session, session.begin():
            last = store.last_change(session, queue.name, DRY_RUN)
            if last is not None and last.before == change.before and last.after == change.after:
                return
            change = _with_id(change, store.record_change(session, change))
        kube.queue_event(self.api, self.settings.event_namespace, queue, "CapabilityPlanned", describe(change),
                         self.leader.identity, now)
        self._announce(change)

    def _announce(self, change: CapabilityChange) -> None:
        if self.announce is None:
            return
        try:
            self.announce(change)
        except Exception:  # a notifier problem must not undo or repeat the change
            log.exception("capability: announcing the change of queue %s failed", change.queue)

    def _count(self, queue: str, outcome: str, leading: bool) -> None:
        if leading and outcome in OUTCOMES:
            with self._lock:
                self._counts[(queue, outcome)] += 1

    def _publish(self, plan: QueuePlan, outcome: str, now: float, leading: bool) -> None:
        at = datetime.fromtimestamp(now, UTC)
        status = {"queue": plan.queue, "policy": plan.policy, "mode": self.settings.mode, "outcome": outcome,
                  "leader": leading, "identity": self.leader.identity, "planned_at": at,
                  "resources": store.plan_document(plan), "inputs": plan.inputs}
        with self._lock:
            self._status[plan.queue] = status
            self._targets[plan.queue] = {r: p.target for r, p in plan.resources.items() if p.target is not None}
        if leading:
            try:
                with Session(self.engine) as session, session.begin():
                    store.save_plan(session, plan, self.settings.mode, outcome, self.leader.identity, at)
            except SQLAlchemyError as exc:
                log.warning("capability: storing the plan of queue %s failed: %s", plan.queue,
                            str(exc).splitlines()[0])

    # ---- read side (API, metrics) ------------------------------------------------------------------------

    def status(self, queue: str) -> dict[str, Any]:
        """This replica's latest plan of `queue` ({} when it has none: no policy, or not reconciled yet)."""
        with self._lock:
            found = self._status.get(queue)
            return dict(found) if found is not None else {}

    def knows(self, queue: str) -> bool:
        """The queue exists in the cluster (as the informer sees it) or has a policy."""
        with self._lock:
            return queue in self._queues or queue in self.settings.policies

    def targets(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {q: dict(t) for q, t in self._targets.items()}

    def update_counts(self) -> dict[tuple[str, str], int]:
        """(queue, outcome) -> plans counted by this replica while it led; every outcome of every configured
        queue is present (0 until it happens), so rate() sees each series from its start."""
        with self._lock:
            counts = dict(self._counts)
        for queue in self.settings.policies:
            for outcome in OUTCOMES:
                counts.setdefault((queue, outcome), 0)
        return counts


def _with_id(change: CapabilityChange, change_id: int) -> CapabilityChange:
    return replace(change, id=change_id)


def describe(change: CapabilityChange) -> str:
    """One line for the Event: `capability cpu 100 -> 75, memory 400Gi -> 300Gi (share: ...)`."""
    def shown(resource: str, value: float | None) -> str:
        return "unset" if value is None else format_quantity(resource, value)

    moves = ", ".join(f"{r} {shown(r, change.before.get(r))} -> {shown(r, v)}" for r, v in change.after.items())
    verb = "set" if change.outcome == APPLIED else "would set (dry-run)"
    reasons = "; ".join(dict.fromkeys(change.why.values()))
    return f"capability {verb}: {moves} ({reasons})"
