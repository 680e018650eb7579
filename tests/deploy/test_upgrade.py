"""`helm upgrade` between the chart's modes: unsharded -> sharded -> unsharded exporter, rendered by the real
helm with the same release name and namespace. Between two consecutive revisions no object that keeps its
name may change a field the API server refuses to change (the upgrade would fail half-way, issue 11), and
in every revision Prometheus scrapes each exporter pod exactly once."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from tests.deploy.chart import CHART, NAMESPACE, component, of_kind, render, workloads

ALL_ON = str(CHART / "ci" / "all-on-values.yaml")
# (values files, --set of every revision): the defaults with ServiceMonitors, and every option at once.
BASES = {
    "default": ((), ("serviceMonitor.enabled=true",)),
    "all-on": ((ALL_ON,), ()),
}
MODES = ("exporter.sharding.enabled=false", "exporter.sharding.enabled=true", "exporter.sharding.enabled=false")

# StatefulSet spec fields the API server lets an update change; every other one is immutable.
STATEFULSET_MUTABLE = {"replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                       "minReadySeconds"}

Key = tuple[str, str, str]  # (kind, namespace, name)


def revisions(base: str) -> list[list[dict[str, Any]]]:
    values, sets = BASES[base]
    return [render(values=values, sets=(*sets, mode)) for mode in MODES]


def key(doc: dict[str, Any]) -> Key:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def immutable_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """The fields of `doc` an update may not change, with the API server's defaults filled in where the
    chart leaves a field unset (an unset clusterIP gets an address; None makes the Service headless)."""
    kind, spec = doc["kind"], doc.get("spec", {})
    if kind == "Service":
        return {"spec.type": spec.get("type", "ClusterIP"), "spec.clusterIP": spec.get("clusterIP", "<assigned>"),
                "spec.clusterIPs": spec.get("clusterIPs", "<assigned>")}
    if kind in ("Deployment", "DaemonSet"):
        return {"spec.selector": spec.get("selector")}
    if kind == "StatefulSet":
        fields = {f"spec.{name}": value for name, value in spec.items() if name not in STATEFULSET_MUTABLE}
        # Defaults an unset field gets, so that "unset" and "set to the default" compare equal.
        fields.setdefault("spec.podManagementPolicy", "OrderedReady")
        fields.setdefault("spec.volumeClaimTemplates", [])
        fields.setdefault("spec.serviceName", "")
        return fields
    if kind == "Job":
        return {"spec.selector": spec.get("selector"), "spec.template": spec.get("template"),
                "spec.completions": spec.get("completions")}
    if kind == "PersistentVolumeClaim":
        return {f"spec.{name}": value for name, value in spec.items() if name != "resources"}
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        return {"roleRef": doc["roleRef"]}
    return {}


def upgrade_problems(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """What the API server (or Helm) would refuse when `old` is upgraded to `new`."""
    problems = []
    before = {key(doc): doc for doc in old}
    after = {key(doc): doc for doc in new}
    for object_key in sorted(before.keys() & after.keys()):
        was, now = immutable_fields(before[object_key]), immutable_fields(after[object_key])
        for field in sorted(was.keys() | now.keys()):
            if was.get(field) != now.get(field):
                problems.append(f"{'/'.join(object_key)}: immutable {field} changes from {was.get(field)!r} "
                                f"to {now.get(field)!r}")
    # A name that loses one kind and gains another: the new object is created while the old one still
    # exists (both run at once, and a failed upgrade leaves both behind).
    names = {(k[1], k[2]) for k in before.keys() | after.keys()}
    for namespace, name in sorted(names):
        gone = {k[0] for k in before.keys() - after.keys() if (k[1], k[2]) == (namespace, name)}
        new_kinds = {k[0] for k in after.keys() - before.keys() if (k[1], k[2]) == (namespace, name)}
        if gone and new_kinds:
            problems.append(f"{namespace}/{name}: changes kind from {sorted(gone)} to {sorted(new_kinds)}")
    return problems


@pytest.mark.parametrize("base", sorted(BASES))
def test_upgrades_between_sharded_and_unsharded_change_no_immutable_field(base: str) -> None:
    docs = revisions(base)
    problems = []
    for number, (old, new) in enumerate(pairwise(docs), start=1):
        problems += [f"{MODES[number - 1]} -> {MODES[number]}: {p}" for p in upgrade_problems(old, new)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("base", sorted(BASES))
def test_each_revision_runs_one_kind_of_exporter(base: str) -> None:
    for mode, docs in zip(MODES, revisions(base), strict=True):
        kinds = sorted(doc["kind"] for doc in workloads(docs) if component(doc) == "exporter")
        assert kinds == (["StatefulSet"] if mode.endswith("true") else ["Deployment"]), (mode, kinds)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_service_monitor_scrapes_every_exporter_pod_exactly_once(base: str) -> None:
    """Prometheus scrapes each endpoint of each Service the ServiceMonitor selects: exactly one of the
    selected Services may select the exporter pods, on the metrics port; when sharded it is headless (each
    shard serves its own part of the metrics) and it is the StatefulSet's governing Service."""
    for mode, docs in zip(MODES, revisions(base), strict=True):
        monitor = next(m for m in of_kind(docs, "ServiceMonitor") if component(m) == "exporter")
        (workload,) = [doc for doc in workloads(docs) if component(doc) == "exporter"]
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selects(workload["spec"]["selector"]["matchLabels"], pod_labels)
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        scraped = [s for s in of_kind(docs, "Service")
                   if s["metadata"]["namespace"] == NAMESPACE
                   and selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
                   and selects(s["spec"]["selector"], pod_labels)]
        assert len(scraped) == 1, (mode, [s["metadata"]["name"] for s in scraped])
        (service,) = scraped
        (endpoint,) = monitor["spec"]["endpoints"]
        port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
        container_ports = {p["name"] for p in workload["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert port["targetPort"] in container_ports
        if workload["kind"] == "StatefulSet":
            assert service["spec"].get("clusterIP") == "None", mode
            assert workload["spec"]["serviceName"] == service["metadata"]["name"]
        else:
            assert "clusterIP" not in service["spec"], mode


def test_the_upgrade_check_sees_what_the_api_server_refuses() -> None:
    """The checker itself, on hand-made objects: each change below fails a real `helm upgrade`."""
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}

    service = obj("Service", "s", {"ports": []})
    headless = obj("Service", "s", {"clusterIP": "None", "ports": []})
    sts = obj("StatefulSet", "w", {"serviceName": "s", "selector": {"matchLabels": {"a": "1"}}, "replicas": 1})
    assert upgrade_problems([service], [headless]) and upgrade_problems([headless], [service])
    assert upgrade_problems([sts], [obj("Deployment", "w", {"selector": {"matchLabels": {"a": "1"}}})])
    for change in ({"serviceName": "other"}, {"selector": {"matchLabels": {"a": "2"}}},
                   {"podManagementPolicy": "Parallel"}, {"volumeClaimTemplates": [{"metadata": {"name": "d"}}]}):
        assert upgrade_problems([sts], [obj("StatefulSet", "w", {**sts["spec"], **change})]), change
    assert not upgrade_problems([sts], [obj("StatefulSet", "w", {**sts["spec"], "replicas": 5})])
    assert not upgrade_problems([service], [obj("Service", "s", {"type": "ClusterIP", "ports": [{"port": 1}]})])
    # Removing one object and adding another under a new name is what an upgrade may do.
    assert not upgrade_problems([service, sts], [obj("Service", "s-headless", {"clusterIP": "None"})])
