"""The Helm chart, rendered by the real helm: lint, Kubernetes schemas, RBAC, pod security, storage rules,
sharding, and the Prometheus Operator objects built from files/."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.crdschema import _strict as strict_schema
from tests.deploy.chart import (
    CHART,
    CI_VALUES,
    FIXTURE_DASHBOARD,
    FIXTURE_RULES,
    NAMESPACE,
    ROOT,
    chart_copy,
    helm,
    of_kind,
    one,
    render,
    render_error,
    render_text,
    template_command,
    workloads,
)

ALL_ON = str(CHART / "ci" / "all-on-values.yaml")
POSTGRES = str(CHART / "ci" / "postgres-values.yaml")
VALUE_SETS = [(), (ALL_ON,), (POSTGRES,)]
VALUE_IDS = ["default", "all-on", "postgres"]
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "default")
def test_helm_lint_is_clean(values: Path | None) -> None:
    command = [helm(), "lint", "--strict", str(CHART)] + (["--values", str(values)] if values else [])
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_every_option_file_really_turns_the_options_on(fixture_chart: Path) -> None:
    kinds = {doc["kind"] for doc in render(fixture_chart, (ALL_ON,))}
    assert {"StatefulSet", "ServiceMonitor", "PrometheusRule", "ConfigMap", "Secret", "Deployment"} <= kinds
    assert "PersistentVolumeClaim" not in kinds  # PostgreSQL


@pytest.mark.parametrize("version", ["1.25.0", "1.37.0"])
@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_rendered_objects_pass_kubernetes_validate_strict(fixture_chart: Path, values: tuple[str, ...],
                                                          version: str) -> None:
    """`helm template | kubernetes-validate --strict` for the chart's oldest and the newest Kubernetes.
    kubernetes-validate has no schema for the Prometheus Operator kinds: it warns about them (and only
    them); their structure is checked by the tests below instead."""
    text = render_text(fixture_chart, values)
    validate = Path(sys.executable).with_name("kubernetes-validate")
    done = subprocess.run([str(validate), "--strict", "-k", version, "-"], input=text, capture_output=True, text=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "ERROR" not in output, output
    passed = [line for line in output.splitlines() if line.startswith("INFO") and " passed " in line]
    unknown = [line for line in output.splitlines() if "Couldn't find schema" in line]
    docs = render(fixture_chart, values)
    assert len(passed) == sum(doc["kind"] not in OPERATOR_KINDS for doc in docs)
    assert len(unknown) == sum(doc["kind"] in OPERATOR_KINDS for doc in docs)
    assert all(any(kind in line for kind in OPERATOR_KINDS) for line in unknown), unknown


# ---- RBAC -----------------------------------------------------------------------------------------------

READ = ("get", "list", "watch")
EXPORTER_RULES = (  # events: evictions and preemptions; nodes: topology_fragmented; the newer kinds where served
    {("", r, v) for r in ("pods", "events", "nodes") for v in READ} | {("batch.volcano.sh", "jobs", v) for v in READ}
    | {("scheduling.volcano.sh", r, v) for r in ("podgroups", "queues") for v in READ}
    | {(g, r, v) for g, r in (("batch.volcano.sh", "cronjobs"), ("topology.volcano.sh", "hypernodes"),
                              ("flow.volcano.sh", "jobflows"), ("scheduling.k8s.io", "priorityclasses"))
       for v in READ})
WATCHDOG_RULES = (
    {("", r, v) for r in ("pods", "nodes") for v in READ}
    | {("batch.volcano.sh", "jobs", v) for v in READ}
    | {("scheduling.volcano.sh", r, v) for r in ("podgroups", "queues") for v in READ}
    | {("scheduling.k8s.io", "priorityclasses", v) for v in READ}
    | {("topology.volcano.sh", "hypernodes", v) for v in READ}
    | {("metrics.k8s.io", r, v) for r in ("pods", "nodes") for v in ("get", "list")}
    | {("", "events", v) for v in (*READ, "create", "patch")}
)
# Only the capability controller writes Queues: granted when capability control is on.
QUEUE_PATCH = {("scheduling.volcano.sh", "queues", "patch")}
LEASE_RULES = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}


def granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    out.add((group, resource, verb))
    return out


def pod_spec(docs: list[dict[str, Any]], name_suffix: str) -> dict[str, Any]:
    """The pod spec of the workload named *<name_suffix>; "-exporter" also finds the sharded StatefulSet
    (<fullname>-exporter-shard)."""
    suffixes = (name_suffix, f"{name_suffix}-shard") if name_suffix == "-exporter" else (name_suffix,)
    workload = next(doc for doc in workloads(docs) if doc["metadata"]["name"].endswith(suffixes))
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_rbac_grants_exactly_what_each_component_needs(values: tuple[str, ...]) -> None:
    docs = render(values=values)
    exporter = one(docs, "ClusterRole", "-exporter")
    watchdog = one(docs, "ClusterRole", "-watchdog")
    lease_role = one(docs, "Role", "-watchdog-leader-election")
    assert len(of_kind(docs, "ClusterRole")) == 2 and len(of_kind(docs, "Role")) == 1
    assert granted(exporter) == EXPORTER_RULES
    capability = values == (ALL_ON,)  # the one values file with watchdog.config.capability.enabled
    assert granted(watchdog) == WATCHDOG_RULES | (QUEUE_PATCH if capability else set())
    assert granted(lease_role) == LEASE_RULES
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert all("resourceNames" not in rule for rule in exporter["rules"] + watchdog["rules"])

    # get/update only on the watchdog's own Lease: the name the watchdog is told to use.
    env = env_of(pod_spec(docs, "-watchdog")["containers"][0])
    lease = env["VOLCANO_WATCHDOG_LEADER_ELECTION__LEASE_NAME"]["value"]
    for rule in lease_role["rules"]:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == [lease]
        else:
            assert rule["verbs"] == ["create"] and "resourceNames" not in rule

    # Each role is bound to the ServiceAccount its pods run as, and nothing else.
    bindings = of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding")
    assert len(bindings) == 3
    for role, suffix in ((exporter, "-exporter"), (watchdog, "-watchdog"), (lease_role, "-watchdog")):
        binding = next(b for b in bindings if b["roleRef"]["name"] == role["metadata"]["name"])
        assert binding["roleRef"]["kind"] == role["kind"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod_spec(docs, suffix)["serviceAccountName"],
                                        "namespace": NAMESPACE}]


CAPABILITY_ENV = "watchdog.extraEnv[0].name=VOLCANO_WATCHDOG_CAPABILITY__ENABLED"


@pytest.mark.parametrize(("sets", "patches"), [
    ((), False),
    (("watchdog.config.capability.enabled=false",), False),
    (("watchdog.config.capability.enabled=true",), True),
    (("watchdog.config.capability.enabled=true", "watchdog.config.capability.mode=dry-run"), True),
    ((CAPABILITY_ENV, "watchdog.extraEnv[0].value=on"), True),
    (("watchdog.config.capability.enabled=true", CAPABILITY_ENV, "watchdog.extraEnv[0].value=false"), False),
], ids=["default", "off", "on", "dry-run", "env-on", "env-off"])
def test_queue_patch_is_granted_exactly_when_the_watchdog_runs_capability_control(
        sets: tuple[str, ...], patches: bool, tmp_path: Path) -> None:
    """The grant follows capability.enabled as the watchdog itself reads it: its config file from the
    rendered Secret, overridden by its environment."""
    docs = render(sets=sets)
    watchdog = granted(one(docs, "ClusterRole", "-watchdog"))
    assert watchdog == WATCHDOG_RULES | (QUEUE_PATCH if patches else set())
    assert watchdog_settings(docs, tmp_path).capability.enabled is patches


JOB_CREATE = {("batch.volcano.sh", "jobs", "create")}
OOM_ENV = "watchdog.extraEnv[0].name=VOLCANO_WATCHDOG_OOM_SCALE_UP__ENABLED"


@pytest.mark.parametrize(("sets", "creates"), [
    ((), False),
    (("watchdog.config.oom_scale_up.enabled=false",), False),
    (("watchdog.config.oom_scale_up.enabled=true",), True),
    ((OOM_ENV, "watchdog.extraEnv[0].value=yes"), True),
    (("watchdog.config.oom_scale_up.enabled=true", OOM_ENV, "watchdog.extraEnv[0].value=0"), False),
], ids=["default", "off", "on", "env-on", "env-off"])
def test_job_create_is_granted_exactly_when_the_watchdog_runs_oom_scale_up(
        sets: tuple[str, ...], creates: bool, tmp_path: Path) -> None:
    """OOM auto scale-up's resubmissions are the watchdog's only Job writes: `create` on Volcano Jobs
    follows oom_scale_up.enabled as the watchdog reads it, and nothing else changes."""
    docs = render(sets=sets)
    watchdog = granted(one(docs, "ClusterRole", "-watchdog"))
    assert watchdog == WATCHDOG_RULES | (JOB_CREATE if creates else set())
    assert watchdog_settings(docs, tmp_path).oom_scale_up.enabled is creates
    told = render(sets=("watchdog.existingConfigSecret=my-config", "watchdog.rbac.createJobs=true"))
    assert granted(one(told, "ClusterRole", "-watchdog")) == WATCHDOG_RULES | JOB_CREATE


def test_queue_patch_with_an_existing_config_secret_needs_rbac_patch_queues() -> None:
    """The chart cannot read an existing Secret: `watchdog.config` is then ignored, for RBAC too."""
    unseen = render(sets=("watchdog.existingConfigSecret=my-config", "watchdog.config.capability.enabled=true"))
    assert granted(one(unseen, "ClusterRole", "-watchdog")) == WATCHDOG_RULES
    told = render(sets=("watchdog.existingConfigSecret=my-config", "watchdog.rbac.patchQueues=true"))
    assert granted(one(told, "ClusterRole", "-watchdog")) == WATCHDOG_RULES | QUEUE_PATCH


# ---- pods ---------------------------------------------------------------------------------------------

def dockerfile_uid() -> int:
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("ARG APP_UID="):
            return int(line.split("=", 1)[1])
    raise AssertionError("Dockerfile has no ARG APP_UID")


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_every_pod_runs_restricted_with_probes_resources_and_a_tmp_volume(values: tuple[str, ...]) -> None:
    docs = render(values=values)
    image_values = yaml.safe_load(Path(values[0]).read_text()).get("image", {}) if values else {}
    image = f"{image_values.get('repository', 'volcano-monitor')}:{image_values.get('tag', '0.1.0')}"
    uid = dockerfile_uid()
    pods = [doc["spec"]["template"]["spec"] for doc in workloads(docs)]
    assert len(pods) == 2
    for pod in pods:
        ctx = pod["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == uid != 0 and ctx["runAsGroup"] == uid
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["enableServiceLinks"] is False
        tmp_volumes = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for container in pod["containers"] + pod.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] == uid
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert "privileged" not in sc
            assert container["image"] == image
            for kind in ("requests", "limits"):
                assert set(container["resources"][kind]) == {"cpu", "memory"}
            assert any(m["mountPath"] == "/tmp" and m["name"] in tmp_volumes for m in container["volumeMounts"])
        for container in pod["containers"]:
            ports = {p["name"] for p in container["ports"]}
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["livenessProbe"]["httpGet"]["port"] in ports
            assert container["readinessProbe"]["httpGet"]["port"] in ports


# ---- watchdog storage -----------------------------------------------------------------------------------

def test_sqlite_with_several_replicas_refuses_to_render() -> None:
    error = render_error("watchdog.replicas=2")
    assert "watchdog.replicas is 2 but SQLite allows one writer" in error
    assert "watchdog.database.type=postgresql" in error
    assert "SQLite" in render_error("watchdog.replicas=3", "watchdog.persistence.enabled=false")


def test_postgresql_needs_a_url_and_type_must_be_known() -> None:
    assert "watchdog.database.existingSecret" in render_error("watchdog.database.type=postgresql")
    assert 'not "mysql"' in render_error("watchdog.database.type=mysql")


def test_sqlite_lives_on_the_claim_and_the_deployment_recreates() -> None:
    docs = render()
    deployment = one(docs, "Deployment", "-watchdog")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"} and deployment["spec"]["replicas"] == 1
    claim = one(docs, "PersistentVolumeClaim")
    pod = deployment["spec"]["template"]["spec"]
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    for container in pod["containers"] + pod["initContainers"]:
        mount = next(m for m in container["volumeMounts"] if m["name"] == "data")
        url = env_of(container)["VOLCANO_WATCHDOG_DATABASE_URL"]["value"]
        assert url == f"sqlite:///{mount['mountPath']}/watchdog.db"


def test_postgresql_url_comes_from_a_secret_and_replicas_roll() -> None:
    docs = render(values=(POSTGRES,))
    deployment = one(docs, "Deployment", "-watchdog")
    assert deployment["spec"]["replicas"] == 2 and "strategy" not in deployment["spec"]
    assert not of_kind(docs, "PersistentVolumeClaim")
    assert [s["metadata"]["name"] for s in of_kind(docs, "Secret")] == ["volcano-monitor-watchdog-config"]
    pod = deployment["spec"]["template"]["spec"]
    for container in pod["containers"] + pod["initContainers"]:
        ref = env_of(container)["VOLCANO_WATCHDOG_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "volcano-watchdog-database", "key": "url"}
        assert "data" not in {m["name"] for m in container["volumeMounts"]}


def test_migrate_runs_first_with_the_same_settings() -> None:
    pod = pod_spec(render(), "-watchdog")
    (init,) = pod["initContainers"]
    main = pod["containers"][0]
    assert init["command"] == ["volcano-watchdog", "migrate"] and main["command"] == ["volcano-watchdog", "run"]
    for name in ("VOLCANO_WATCHDOG_CONFIG", "VOLCANO_WATCHDOG_DATABASE_URL"):
        assert env_of(init)[name] == env_of(main)[name]
    assert "initContainers" not in pod_spec(render(sets=("watchdog.migrateInitContainer=false",)), "-watchdog")


# ---- exporter -----------------------------------------------------------------------------------------

def test_unsharded_exporter_is_one_replica_deployment() -> None:
    docs = render()
    deployment = one(docs, "Deployment", "-exporter")
    assert deployment["spec"]["replicas"] == 1 and not of_kind(docs, "StatefulSet")
    assert env_of(deployment["spec"]["template"]["spec"]["containers"][0])["VOLCANO_EXPORTER_TOTAL_SHARDS"] == {
        "name": "VOLCANO_EXPORTER_TOTAL_SHARDS", "value": "1"}


def test_sharded_exporter_takes_its_shard_from_the_pod_ordinal(tmp_path: Path) -> None:
    """Runs the StatefulSet's real command line in a shell whose `volcano-exporter` is a stub that parses
    its flags and environment with the exporter's own parser, as pod <name>-2 of 4."""
    docs = render(sets=("exporter.sharding.enabled=true", "exporter.sharding.shards=4",
                        "exporter.namespaces={team-a,team-b}"))
    sts = one(docs, "StatefulSet", "-exporter-shard")
    service = one(docs, "Service", "-exporter-headless")
    assert sts["spec"]["replicas"] == 4
    assert [d["metadata"]["name"] for d in of_kind(docs, "Deployment")] == ["volcano-monitor-watchdog"]
    assert sts["spec"]["serviceName"] == service["metadata"]["name"] and service["spec"]["clusterIP"] == "None"
    # The headless Service replaces the unsharded one (a Service cannot become headless: tests/deploy/test_upgrade.py).
    assert sorted(s["metadata"]["name"] for s in of_kind(docs, "Service")) == [
        "volcano-monitor-exporter-headless", "volcano-monitor-watchdog"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    stub = tmp_path / "volcano-exporter"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nfrom exporter.cli import parse_args\n"
                    "a = parse_args(sys.argv[1:])\n"
                    "print(json.dumps([a.shard, a.total_shards, a.namespaces, list(a.listen)]))\n")
    stub.chmod(0o755)
    env = {item["name"]: item["value"] for item in container["env"]}
    env |= {"HOSTNAME": f"{sts['metadata']['name']}-2", "PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(container["command"] + container["args"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [2, 4, ["team-a", "team-b"], ["0.0.0.0", 9746]]


# ---- the watchdog's settings as the chart sets them ---------------------------------------------------

def watchdog_settings(docs: list[dict[str, Any]], tmp_path: Path) -> Any:
    """The settings the watchdog container would load: its config file from the rendered Secret and its
    environment, with the downward API and Secret references resolved as the kubelet would."""
    from volcano_monitor.watchdog.config import load

    pod = pod_spec(docs, "-watchdog")
    container = pod["containers"][0]
    secrets = {s["metadata"]["name"]: s["data"] for s in of_kind(docs, "Secret")}
    environ = {}
    for item in container["env"]:
        source = item.get("valueFrom", {})
        if "value" in item:
            environ[item["name"]] = item["value"]
        elif "fieldRef" in source:
            environ[item["name"]] = {"metadata.namespace": NAMESPACE, "metadata.name": "watchdog-pod-0"}[
                source["fieldRef"]["fieldPath"]]
        else:
            ref = source["secretKeyRef"]
            environ[item["name"]] = base64.b64decode(secrets[ref["name"]][ref["key"]]).decode()
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")["secret"]
    config = tmp_path / "config.yaml"
    config.write_text(base64.b64decode(secrets[config_volume["secretName"]]["config.yaml"]).decode())
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")["mountPath"]
    assert environ.pop("VOLCANO_WATCHDOG_CONFIG") == f"{mount}/{config_volume['items'][0]['path']}"
    environ.pop("VOLCANO_WATCHDOG_LOG_LEVEL")
    return load(config, environ=environ)


def test_watchdog_accepts_the_settings_the_chart_gives_it(tmp_path: Path) -> None:
    docs = render(values=(ALL_ON,))
    settings = watchdog_settings(docs, tmp_path)
    role = one(docs, "Role", "-leader-election")
    assert settings.leader_election.enabled is True
    assert settings.leader_election.namespace == NAMESPACE == role["metadata"]["namespace"]
    assert settings.leader_election.identity == "watchdog-pod-0"
    assert [settings.leader_election.lease_name] == role["rules"][1]["resourceNames"]
    assert settings.leader_election.lease_duration_seconds == 20  # from watchdog.config
    assert settings.database_url == "postgresql+psycopg://watchdog:pw@postgres.example:5432/watchdog"
    assert settings.api_token.get_secret_value() == "s3cr3t-token"
    assert [r.name for r in settings.notifications.receivers] == ["ml-team"]
    assert settings.detectors.idle_window_seconds == 900  # from watchdog.extraEnv
    assert settings.listen == "0.0.0.0:9747"
    assert settings.capability.enabled is True and settings.capability.mode == "apply"
    defaults = watchdog_settings(render(), tmp_path)
    assert defaults.database_url == "sqlite:////var/lib/volcano-watchdog/watchdog.db" and defaults.api_token is None


def test_config_secret_holds_the_config_and_a_change_rolls_the_pods() -> None:
    docs = render(values=(ALL_ON,))
    secret = one(docs, "Secret", "-watchdog-config")
    expected = yaml.safe_load(Path(ALL_ON).read_text())["watchdog"]["config"]
    assert yaml.safe_load(base64.b64decode(secret["data"]["config.yaml"])) == expected
    checksum = one(docs, "Deployment", "-watchdog")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    for change in ("watchdog.config.grafana_url=https://other.example", "watchdog.apiToken.value=other",
                   "watchdog.database.url=postgresql://other/db"):
        changed = render(values=(ALL_ON,), sets=(change,))
        assert one(changed, "Deployment", "-watchdog")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"] != checksum, change
    existing = render(sets=("watchdog.existingConfigSecret=my-config",))
    assert not [s for s in of_kind(existing, "Secret") if s["metadata"]["name"].endswith("-config")]
    volume = next(v for v in pod_spec(existing, "-watchdog")["volumes"] if v["name"] == "config")
    assert volume["secret"]["secretName"] == "my-config"


# ---- Prometheus Operator objects and dashboards ----------------------------------------------------------

def test_service_monitors_select_the_services_and_keep_the_series_labels() -> None:
    docs = render(values=(ALL_ON,))
    monitors = of_kind(docs, "ServiceMonitor")
    assert len(monitors) == 2
    for monitor, job in zip(sorted(monitors, key=lambda m: m["metadata"]["name"]),
                            ("volcano-exporter", "volcano-watchdog"), strict=True):
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["namespace"] == NAMESPACE
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        spec = monitor["spec"]
        assert set(spec) == {"namespaceSelector", "selector", "endpoints"}
        assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        services = [s for s in of_kind(docs, "Service")
                    if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert len(services) == 1
        (endpoint,) = spec["endpoints"]
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "honorLabels", "relabelings",
                                 "metricRelabelings"}
        assert endpoint["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
        assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
        assert endpoint["interval"] == "15s" and endpoint["scrapeTimeout"] == "10s"
        assert endpoint["relabelings"] == [{"action": "replace", "targetLabel": "job", "replacement": job}]
    assert not of_kind(render(), "ServiceMonitor")


def test_compat_families_are_relabeled_for_volcanos_dashboards_only_with_the_value() -> None:
    """Volcano's dashboards select the fork's families with job="kube-state-metrics" (docs/compat.md)."""
    relabel = {"action": "replace", "sourceLabels": ["__name__"], "regex": "kube_pod_volcano_.*",
               "targetLabel": "job", "replacement": "kube-state-metrics"}
    for sets, expected in ((("exporter.compatKubeStateMetricsFork=true",), [relabel]), ((), None)):
        monitors = of_kind(render(sets=("serviceMonitor.enabled=true", *sets)), "ServiceMonitor")
        by_name = {m["metadata"]["name"]: m["spec"]["endpoints"][0] for m in monitors}
        assert by_name["volcano-monitor-exporter"].get("metricRelabelings") == expected
        assert "metricRelabelings" not in by_name["volcano-monitor-watchdog"]


SERVICE_MONITOR_CRD = ROOT.parent / "shared" / "prometheus-operator" / "crds" / \
    "monitoring.coreos.com_servicemonitors.yaml"


def service_monitor_errors(monitor: dict[str, Any]) -> list[str]:
    """`monitor` checked against the Prometheus Operator's ServiceMonitor CRD, strictly as tests/crdschema.py
    checks Volcano's kinds: the API server would prune a misspelt field (a `targetlabel`) silently."""
    crd = yaml.safe_load(SERVICE_MONITOR_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == monitor["apiVersion"].split("/")[1]]
    validator = jsonschema.Draft7Validator(strict_schema(version["schema"]["openAPIV3Schema"]))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors(monitor)]


def test_service_monitor_validation_is_not_a_no_op() -> None:
    monitor = of_kind(render(values=(ALL_ON,)), "ServiceMonitor")[0]
    assert service_monitor_errors(monitor) == []
    monitor["spec"]["endpoints"][0]["relabelings"][0]["targetlabel"] = "cluster"
    assert service_monitor_errors(monitor)


def test_cluster_label_is_added_to_every_series_only_when_set() -> None:
    """serviceMonitor.clusterLabel: both ServiceMonitors relabel every target with `cluster: <value>` (for
    several clusters in one Prometheus or Thanos: docs/deploy.md#several-clusters); unset, no label."""
    for sets, cluster in ((("serviceMonitor.clusterLabel=prod-eu",), "prod-eu"), ((), None)):
        monitors = of_kind(render(values=(ALL_ON,), sets=sets), "ServiceMonitor")
        assert len(monitors) == 2
        for monitor in monitors:
            assert service_monitor_errors(monitor) == [], monitor["metadata"]["name"]
            relabelings = monitor["spec"]["endpoints"][0]["relabelings"]
            added = [r for r in relabelings if r["targetLabel"] == "cluster"]
            if cluster is None:
                assert added == []
            else:
                assert added == [{"action": "replace", "targetLabel": "cluster", "replacement": cluster}]
                assert relabelings[0]["targetLabel"] == "job"  # the job label is kept
    # A value YAML would read as a number or a boolean stays a string, as the CRD requires.
    (monitor, _) = of_kind(render(sets=("serviceMonitor.enabled=true", "serviceMonitor.clusterLabel=1")),
                           "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["relabelings"][-1]["replacement"] == "1"
    assert service_monitor_errors(monitor) == []


def test_cardinality_values_reach_the_exporter_as_it_parses_them(tmp_path: Path) -> None:
    """The exporter container's environment, parsed by the exporter's own flag parser."""
    from volcano_monitor.exporter.cli import parse_args

    docs = render(values=(ALL_ON,))
    container = one(docs, "StatefulSet", "-exporter-shard")["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        options = parse_args(["--shard", "0"]).options
    assert options.compat_ksm_fork is True
    assert not options.families.allows("volcano_task_spec_replicas") and options.families.allows("volcano_pod_info")
    assert options.labels.kinds == {"jobs": None, "pods": ("team", "app.kubernetes.io/name")}
    assert options.max_objects == {"jobs": 20000, "pods": 200000}
    default = env_of(one(render(), "Deployment", "-exporter")["spec"]["template"]["spec"]["containers"][0])
    assert not {k for k in default if "METRIC" in k or "MAX_OBJECTS" in k or "COMPAT" in k}


def test_allowlist_and_denylist_together_refuse_to_render() -> None:
    done = subprocess.run(template_command(sets=("exporter.metricAllowlist={a}", "exporter.metricDenylist={b}")),
                          capture_output=True, text=True)
    assert done.returncode != 0 and "mutually exclusive" in done.stderr


def test_prometheus_rules_are_built_from_the_rule_files(fixture_chart: Path, tmp_path: Path) -> None:
    docs = render(fixture_chart, sets=("prometheusRule.enabled=true", "prometheusRule.labels.release=kps"))
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == "volcano-monitor-rules-volcano-fixture"
    assert rule["metadata"]["namespace"] == NAMESPACE and rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(FIXTURE_RULES)  # annotation templates and block text unchanged
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit", "query_offset"}
        for item in group["rules"]:
            assert set(item) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert ("alert" in item) != ("record" in item) and isinstance(item["expr"], str)
    # promtool reads the spec as the Prometheus Operator hands it to Prometheus: a rule file.
    path = tmp_path / "spec.rules.yml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not of_kind(render(fixture_chart), "PrometheusRule")  # off by default


def test_dashboards_become_sidecar_config_maps(fixture_chart: Path) -> None:
    docs = render(fixture_chart, sets=("dashboards.namespace=grafana", "dashboards.annotations.grafana_folder=Volcano"))
    config_map = one(docs, "ConfigMap", "-dashboard-volcano-fixture")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Volcano"}
    assert list(config_map["data"]) == ["volcano_fixture.json"]
    assert json.loads(config_map["data"]["volcano_fixture.json"]) == json.loads(FIXTURE_DASHBOARD)
    assert not of_kind(render(fixture_chart, sets=("dashboards.enabled=false",)), "ConfigMap")


def test_no_files_no_rules_or_dashboards(empty_chart: Path) -> None:
    docs = render(empty_chart, sets=("prometheusRule.enabled=true", "dashboards.enabled=true"))
    assert not of_kind(docs, "PrometheusRule") and not of_kind(docs, "ConfigMap")


def test_a_rule_file_that_is_not_a_rule_file_fails_the_render(tmp_path: Path) -> None:
    chart = chart_copy(tmp_path, {"broken.rules.yml": "rules:\n  - alert: X\n"})
    done = subprocess.run(template_command(chart, (), ("prometheusRule.enabled=true",)), capture_output=True,
                          text=True)
    assert done.returncode != 0
    assert "files/alerts/broken.rules.yml must be a Prometheus rule file" in done.stderr


def test_the_charts_own_rule_files_and_dashboards_reach_the_objects_unchanged() -> None:
    """Whatever alerts/ and dashboards/ hold today (copied into files/; possibly nothing yet): one object
    per file, with the same content."""
    rule_files = sorted((CHART / "files" / "alerts").glob("*.rules.yml"))
    dashboard_files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    docs = render(sets=("prometheusRule.enabled=true",))
    rules = of_kind(docs, "PrometheusRule")
    assert len(rules) == len(rule_files)
    assert sorted(yaml.safe_dump(r["spec"]) for r in rules) == sorted(
        yaml.safe_dump(yaml.safe_load(path.read_text())) for path in rule_files)
    dashboards = {key: value for cm in of_kind(docs, "ConfigMap") for key, value in cm["data"].items()}
    assert dashboards == {path.name: path.read_text().rstrip("\n") for path in dashboard_files}
    for cm in of_kind(docs, "ConfigMap"):
        assert len(json.dumps(cm)) < 256 * 1024, "too large for `kubectl apply` (client-side) annotations"


@pytest.mark.parametrize("off", ["exporter", "watchdog"])
def test_a_disabled_component_leaves_nothing_behind(off: str) -> None:
    docs = render(values=(ALL_ON,), sets=(f"{off}.enabled=false",))
    left = {doc["metadata"]["labels"]["app.kubernetes.io/component"] for doc in docs}
    assert off not in left and left >= {"watchdog", "exporter"} - {off}
    assert len(of_kind(docs, "ServiceMonitor")) == 1


def test_sqlite_without_persistence_uses_an_empty_dir_and_existing_claims_are_used() -> None:
    pod = pod_spec(render(sets=("watchdog.persistence.enabled=false",)), "-watchdog")
    assert next(v for v in pod["volumes"] if v["name"] == "data") == {"name": "data", "emptyDir": {}}
    docs = render(sets=("watchdog.persistence.existingClaim=my-claim",))
    assert not of_kind(docs, "PersistentVolumeClaim")
    data = next(v for v in pod_spec(docs, "-watchdog")["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"]["claimName"] == "my-claim"
