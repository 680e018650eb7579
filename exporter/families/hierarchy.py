"""Queue hierarchy roll-ups: for each queue, what its whole subtree holds and waits for.

Queues form a tree through `spec.parent` (every queue but `root` names one: v1.12's controller
fills in `root`, and `exporter.model` does the same for a queue without it). Only leaf queues run
jobs. Two per-queue amounts exist, and they roll up differently:

- `status.allocated` is written by Volcano for every queue, and a parent's already includes its
  children's (recorded: `root` reports the sum of its children). Summing it up the tree would
  count a job once per ancestor, so the subtree's allocation is the sum over the **leaf** queues
  of the subtree (a leaf's own allocation for a leaf).
- The pod requests of `volcano_queue_pod_requests` are derived from pods, each counted in the one
  queue it names, so a subtree's is its own plus all of its descendants'.

Robust to what a cluster may hold while queues are being edited: a parent that does not exist
ends the chain (the queue is a top of its own tree), and a cycle (a -> b -> a) is walked once.
Computed at scrape time: there are tens to hundreds of queues, and the walk is O(queues x depth).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from exporter.families.base import Family, resource_labels
from exporter.podrequests import Resources
from exporter.quantity import resource_label_and_unit

NANO = 1_000_000_000

SUBTREE_ALLOCATED = Family(
    "volcano_queue_subtree_allocated",
    "Resources allocated in the Queue's subtree: the sum of status.allocated over the leaf queues under it "
    "(itself when it is a leaf); a parent's own status.allocated already includes its children's.",
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


def leaves(parents: Mapping[str, str]) -> set[str]:
    """Queues no other queue names as its parent: the ones that run jobs."""
    inner = {parent for name, parent in parents.items() if parent and parent != name}
    return set(parents) - inner


def subtree_allocated(parents: Mapping[str, str], allocated: Mapping[str, Resources]) -> dict[str, dict[str, int]]:
    """Per queue, nano-units per resource summed over the leaves of its subtree."""
    out: dict[str, dict[str, int]] = {name: {} for name in parents}
    for leaf in leaves(parents):
        for name, amount in allocated.get(leaf, ()):
            nano = round(amount * NANO)
            for queue in ancestors(leaf, parents):
                out[queue][name] = out[queue].get(name, 0) + nano
    return out


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
    lines = []
    for values, resources in rows:
        for name, nano in sorted(resources.items()):
            label, unit = resource_label_and_unit(name)
            lines.append(family.line((*values, label, unit), nano / NANO))
    return "".join(lines)


def write(out: list[bytes], parents: Mapping[str, str], allocated: Mapping[str, Resources] | None,
          pod_requests: Mapping[tuple[str, str], Mapping[str, int]]) -> None:
    """Both families appended to `out` (the allocation only when `allocated` is given: shard 0)."""
    if allocated is not None:
        text = _lines(SUBTREE_ALLOCATED, (((q,), r) for q, r in sorted(subtree_allocated(parents, allocated).items())))
        if text:
            out += (SUBTREE_ALLOCATED.header.encode(), text.encode())
    text = _lines(SUBTREE_POD_REQUESTS, sorted(subtree_pod_requests(parents, pod_requests).items()))
    if text:
        out += (SUBTREE_POD_REQUESTS.header.encode(), text.encode())
