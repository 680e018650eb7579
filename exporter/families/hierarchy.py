"""Queue hierarchy roll-ups: for each queue, what its whole subtree holds and waits for.

Queues form a tree through `spec.parent` (every queue but `root` names one: v1.12's controller
fills in `root`, and `core.model` does the same for a queue without it). Volcano runs jobs in leaf
queues only (its hierarchy design: parents accept no submissions). Two per-queue amounts exist, and
they roll up differently:

- `status.allocated` is written by Volcano for every queue, and a parent's already includes its
  children's (recorded on v1.12: `root` reports the sum of its children). Summing it up the tree
  would count a job once per ancestor. The subtree's allocation is, per resource, the larger of the
  queue's own `status.allocated` and the sum of its children's subtree values: the parent's own
  figure where Volcano rolled it up (jobs a parent runs itself included), the children's sum where
  the parent's status is missing or lags (a `root` not yet written, a new parent).
- The pod requests of `volcano_queue_pod_requests` are derived from pods, each counted in the one
  queue it names, so a subtree's is its own plus all of its descendants'.

Robust to what a cluster may hold while queues are being edited: a parent that does not exist
ends the chain (the queue is a top of its own tree), and a cycle (a -> b -> a) is walked once.
Computed at scrape time: there are tens to hundreds of queues, and the walk is O(queues x depth).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from volcano_monitor.core.exposition import Family, resource_labels
from volcano_monitor.core.podrequests import Resources

NANO = 1_000_000_000

SUBTREE_ALLOCATED = Family(
    "volcano_queue_subtree_allocated",
    "Resources allocated in the Queue's subtree: per resource the larger of its own status.allocated (which "
    "Volcano already rolls up from the children) and the sum of its children's subtree values.",
    resource_labels("queue"))
SUBTREE_POD_REQUESTS = Family(
    "volcano_queue_subtree_pod_requests",
    "Sum of the requests of the pending / running pods of the Queue and of every queue under it "
    "(volcano_queue_pod_requests rolled up spec.parent; per exporter shard).",
    resource_labels("queue", "phase"))
FAMILIES = (SUBTREE_ALLOCATED, SUBTREE_POD_REQUESTS)


def ancestors(queue: str, parents: Mapping[str, str]) -> list[str]:
    """`queue` and every queue above it, nearest first; stops at a missing parent or a cycle."""
    chain = [queue]
    seen = {queue}
    parent = parents.get(queue, "")
    while parent and parent not in seen and parent in parents:
        chain.append(parent)
        seen.add(parent)
        parent = parents[parent]
    return chain


def children(parents: Mapping[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for name, parent in parents.items():
        if parent in parents and parent != name:
            out[parent].append(name)
    return out


def subtree_allocated(parents: Mapping[str, str], allocated: Mapping[str, Resources]) -> dict[str, dict[str, int]]:
    """Per queue, nano-units per resource: max(own status.allocated, sum over the children's subtrees).
    A child met again on the way down (a cycle) adds nothing."""
    below = children(parents)
    done: dict[str, dict[str, int]] = {}

    def visit(queue: str, path: set[str]) -> dict[str, int]:
        if queue in done:
            return done[queue]
        total: dict[str, int] = {}
        path.add(queue)
        for child in below.get(queue, ()):
            if child in path:
                continue
            for name, nano in visit(child, path).items():
                total[name] = total.get(name, 0) + nano
        path.discard(queue)
        for name, amount in allocated.get(queue, ()):
            total[name] = max(total.get(name, 0), round(amount * NANO))
        done[queue] = total
        return total

    for queue in parents:
        visit(queue, set())
    return done


def subtree_pod_requests(parents: Mapping[str, str], sums: Mapping[tuple[str, str], Mapping[str, int]]
                         ) -> dict[tuple[str, str], dict[str, int]]:
    """Per (queue, phase), the nano-unit sums of the queue and its descendants. A queue pods name
    but that does not exist is its own subtree."""
    out: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for (queue, phase), resources in sums.items():
        for above in ancestors(queue, parents):
            target = out[(above, phase)]
            for name, nano in resources.items():
                target[name] = target.get(name, 0) + nano
    return out


def _lines(family: Family, rows: Iterable[tuple[tuple[str, ...], Mapping[str, int]]]) -> str:
    """Not through the suffix cache: sums move with every pod, so each scrape's would be new entries
    (a few dozen rows a scrape: rendering them is cheaper than the cache they would fill)."""
    return "".join(family.resource_lines(values, tuple(sorted((name, nano / NANO) for name, nano in resources.items())),
                                         cache=False)
                   for values, resources in rows)


def write(out: list[bytes], parents: Mapping[str, str], allocated: Mapping[str, Resources] | None,
          pod_requests: Mapping[tuple[str, str], Mapping[str, int]],
          allows: Callable[[str], bool] = lambda name: True) -> None:
    """Both families appended to `out` (the allocation only when `allocated` is given: shard 0), each
    only if `allows` its name (--metric-allowlist / --metric-denylist)."""
    if allocated is not None and allows(SUBTREE_ALLOCATED.name):
        text = _lines(SUBTREE_ALLOCATED, (((q,), r) for q, r in sorted(subtree_allocated(parents, allocated).items())))
        if text:
            out += (SUBTREE_ALLOCATED.header.encode(), text.encode())
    if not allows(SUBTREE_POD_REQUESTS.name):
        return
    text = _lines(SUBTREE_POD_REQUESTS, sorted(subtree_pod_requests(parents, pod_requests).items()))
    if text:
        out += (SUBTREE_POD_REQUESTS.header.encode(), text.encode())
