"""Queue subtree roll-ups: allocation never double counted (a parent's own already includes its children's),
pod requests own + descendants, missing parents and cycles, through the store as a scrape shows them."""

from __future__ import annotations

from typing import Any

from tests.exporter import objects
from tests.exporter.test_prometheus import parse_text
from volcano_monitor.core.exposition import _resource_suffixes
from volcano_monitor.core.model import parse_pod, parse_queue
from volcano_monitor.core.podrequests import res_from
from volcano_monitor.core.quantity import parse_short
from volcano_monitor.exporter.families.hierarchy import ancestors, children, subtree_allocated, subtree_pod_requests
from volcano_monitor.exporter.store import ExporterStore

NANO = 1_000_000_000


def queue(name: str, parent: str | None, cpu: str = "0") -> dict[str, Any]:
    spec: dict[str, Any] = {} if parent is None else {"parent": parent}
    return {"metadata": {"name": name, "uid": name, "resourceVersion": "1"}, "spec": spec,
            "status": {"state": "Open", "allocated": {"cpu": cpu}}}


def test_ancestors_stop_at_missing_parents_and_cycles() -> None:
    parents = {"root": "", "a": "root", "a1": "a", "x": "gone", "c1": "c2", "c2": "c1", "self": "self"}
    assert ancestors("a1", parents) == ["a1", "a", "root"]
    assert ancestors("x", parents) == ["x"]  # its parent does not exist: it tops its own tree
    assert ancestors("c1", parents) == ["c1", "c2"]  # the cycle is walked once
    assert ancestors("self", parents) == ["self"]
    assert ancestors("unknown", parents) == ["unknown"]
    assert dict(children(parents)) == {"root": ["a"], "a": ["a1"], "c2": ["c1"], "c1": ["c2"]}
    got = subtree_allocated(parents, {q: res_from({"cpu": 1.0}) for q in parents})
    assert {q: r["cpu"] / NANO for q, r in got.items()} == {
        "root": 1.0, "a": 1.0, "a1": 1.0, "x": 1.0, "c1": 1.0, "c2": 1.0, "self": 1.0}


def test_allocation_is_not_double_counted() -> None:
    """As recorded on v1.12: root's status.allocated is already the sum of its children's; eng also runs
    1 cpu of its own (contrary to Volcano's design, but counted once); sci's status lags behind its child."""
    parents = {"root": "", "eng": "root", "eng-prod": "eng", "eng-dev": "eng", "sci": "root", "sci-a": "sci"}
    allocated = {"root": res_from({"cpu": 9.0}), "eng": res_from({"cpu": 6.0}), "eng-prod": res_from({"cpu": 3.0}),
                 "eng-dev": res_from({"cpu": 2.0}), "sci": res_from({"cpu": 1.0}),
                 "sci-a": res_from({"cpu": 3.0, "memory": 8.0})}
    got = subtree_allocated(parents, allocated)
    assert {q: r.get("cpu", 0) / NANO for q, r in got.items()} == {
        "root": 9.0, "eng": 6.0, "eng-prod": 3.0, "eng-dev": 2.0, "sci": 3.0, "sci-a": 3.0}
    assert got["root"]["memory"] == got["sci"]["memory"] == 8 * NANO  # root's own status lacked memory


def test_pod_requests_add_own_and_descendants() -> None:
    parents = {"root": "", "eng": "root", "eng-prod": "eng", "orphan": "missing"}
    sums = {("eng-prod", "pending"): {"cpu": 2 * NANO}, ("eng", "pending"): {"cpu": 1 * NANO},
            ("orphan", "running"): {"memory": 5 * NANO}, ("nowhere", "pending"): {"cpu": 7 * NANO}}
    got = subtree_pod_requests(parents, sums)
    assert got[("root", "pending")] == {"cpu": 3 * NANO}
    assert got[("eng", "pending")] == {"cpu": 3 * NANO}
    assert got[("eng-prod", "pending")] == {"cpu": 2 * NANO}
    assert got[("orphan", "running")] == {"memory": 5 * NANO} and ("root", "running") not in got
    assert got[("nowhere", "pending")] == {"cpu": 7 * NANO}  # a queue pods name that does not exist


def scraped(store: ExporterStore, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out: list[bytes] = []
    store.write(out)
    return {tuple(sorted(labels.items())): value for n, labels, value in parse_text(b"".join(out).decode())
            if n == name}


def test_the_store_rolls_pending_pods_up_the_tree_and_follows_moves() -> None:
    store = ExporterStore()
    for name, parent, cpu in (("root", None, "6"), ("research", "root", "6"), ("research-nlp", "research", "4"),
                              ("research-cv", "research", "2")):
        raw = parse_queue(queue(name, parent, cpu))
        store.on_queue_tree("ADDED", raw)
        store.on_queue("ADDED", raw)
    pod = objects.volcano_pod()  # pending, 2 cpu, queue from its labels
    pod["metadata"]["labels"]["volcano.sh/queue-name"] = "research-nlp"
    pod["status"]["phase"] = "Pending"
    store.on_pod("ADDED", parse_pod(pod))
    cpu = [(("phase", "pending"), ("queue", q), ("resource", "cpu"), ("unit", "core")) for q in
           ("research-nlp", "research", "root")]
    requests = scraped(store, "volcano_queue_subtree_pod_requests")
    own = parse_pod(pod).requests
    assert [requests.get(k) for k in cpu] == [dict(own)["cpu"]] * 3
    allocated = scraped(store, "volcano_queue_subtree_allocated")
    assert allocated[(("queue", "root"), ("resource", "cpu"), ("unit", "core"))] == 6.0  # not 6 + 6 + 4 + 2
    assert allocated[(("queue", "research-cv"), ("resource", "cpu"), ("unit", "core"))] == 2.0
    # research-nlp moves under root directly: research no longer holds its pods.
    moved = parse_queue(queue("research-nlp", "root", "4"))
    store.on_queue_tree("MODIFIED", moved)
    assert (("phase", "pending"), ("queue", "research"), ("resource", "cpu"), ("unit", "core")) not in \
        scraped(store, "volcano_queue_subtree_pod_requests")
    root_ = parse_queue(queue("root", None, "0"))  # a root whose status was not written yet
    store.on_queue_tree("MODIFIED", root_)
    assert scraped(store, "volcano_queue_subtree_allocated")[(("queue", "root"), ("resource", "cpu"),
                                                              ("unit", "core"))] == 10.0  # research 6 + nlp 4
    store.on_queue_tree("DELETED", moved)
    assert (("queue", "research-nlp"), ("resource", "cpu"), ("unit", "core")) not in \
        scraped(store, "volcano_queue_subtree_allocated")


def test_other_shards_roll_up_their_pods_but_not_the_allocation() -> None:
    quiet = ExporterStore(emit_queues=False)
    for name, parent in (("root", None), ("a", "root")):
        quiet.on_queue_tree("ADDED", parse_queue(queue(name, parent, "3")))
    pod = objects.volcano_pod()
    pod["metadata"]["labels"]["volcano.sh/queue-name"] = "a"
    pod["status"]["phase"] = "Running"
    quiet.on_pod("ADDED", parse_pod(pod))
    assert scraped(quiet, "volcano_queue_subtree_allocated") == {}
    assert (("phase", "running"), ("queue", "root"), ("resource", "cpu"), ("unit", "core")) in \
        scraped(quiet, "volcano_queue_subtree_pod_requests")


def test_moving_allocations_and_sums_leave_the_shared_caches_alone() -> None:
    """A queue's status.allocated and the subtree sums change with every placement. Cached, each value
    took a slot of the quantity and suffix caches that nothing read again (~160 and ~700 bytes; the
    caches hold 8,192 and 4,096), so a busy exporter grew for an hour and the request sizes that do
    repeat were pushed out. They are parsed and rendered uncached; the scrape shows them all the same."""
    store = ExporterStore()
    for name, parent in (("root", None), ("research", "root")):
        raw = parse_queue(queue(name, parent, "1"))
        store.on_queue_tree("ADDED", raw)
        store.on_queue("ADDED", raw)
    pod = objects.volcano_pod()
    pod["metadata"]["labels"]["volcano.sh/queue-name"] = "research"
    store.on_pod("ADDED", parse_pod(pod))
    scraped(store, "volcano_queue_status_allocated")  # the fixed parts (requests, zeros) are cached once
    quantities, suffixes = parse_short.cache_info().currsize, _resource_suffixes.cache_info().currsize
    for n in range(1, 301):
        raw = parse_queue(queue("research", "root", f"{1000 + n}m"))
        raw_root = parse_queue(queue("root", None, f"{2000 + n}m"))
        for changed in (raw, raw_root):
            store.on_queue_tree("MODIFIED", changed)
            store.on_queue("MODIFIED", changed)
        assert scraped(store, "volcano_queue_status_allocated")[(("queue", "research"), ("resource", "cpu"),
                                                          ("unit", "core"))] == (1000 + n) / 1000
        assert scraped(store, "volcano_queue_subtree_allocated")[(("queue", "root"), ("resource", "cpu"),
                                                                  ("unit", "core"))] == (2000 + n) / 1000
    assert parse_short.cache_info().currsize == quantities
    assert _resource_suffixes.cache_info().currsize == suffixes
