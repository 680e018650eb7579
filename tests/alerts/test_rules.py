"""The alert rules in alerts/: the real promtool accepts them and runs their unit tests, every alert the
design names exists with a severity, the three annotations and a runbook section, the unit tests check
every alert firing and not firing, and no alert takes its identity from a scrape target (`instance`):
each alert's labels are worked out from its expression and compared with the intended ones."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import promql_parser as pp
import pytest
import yaml

from tests.promql import ROOT

ALERTS = ROOT / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.rules.yml"))
TEST_FILES = sorted((ALERTS / "tests").glob("*.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_URL = "https://github.com/volcano-monitor/volcano-monitor/blob/main/docs/runbooks.md#"
SEVERITIES = {"critical", "warning", "info"}
ANNOTATIONS = {"summary", "description", "runbook_url"}

# The labels each alert is identified by (besides alertname and severity): one alert per Job, PodGroup,
# queue and resource, or scrape job; never per pod or per scrape target.
# Every alert is also per `cluster` (issue 32): several clusters' series in one Prometheus or Thanos carry
# it, and two clusters' alerts must never merge; without the label it is simply empty.
JOB = {"cluster", "namespace", "job_name", "queue"}
IDENTITY: dict[str, set[str]] = {
    "VolcanoJobFailed": JOB,
    "VolcanoJobPendingTooLong": JOB,
    "VolcanoPodGroupUnschedulable": {"cluster", "namespace", "podgroup", "queue", "job_name"},
    "VolcanoQueueAtCapability": {"cluster", "queue", "resource", "unit"},
    "VolcanoJobLowCPUUtilization": JOB,
    "VolcanoGPUIdle": JOB,
    "VolcanoVGPUMemoryNearLimit": JOB,
    "VolcanoExporterDown": {"cluster", "job", "namespace"},
    "VolcanoExporterNotSynced": {"cluster", "job", "namespace", "resource"},
    "VolcanoWatchdogNotificationsFailing": {"cluster", "job", "namespace", "receiver"},
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (Debian package prometheus)"
    return subprocess.run([promtool, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


def _alerts() -> list[dict[str, Any]]:
    rules = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules += [rule for rule in group["rules"] if "alert" in rule]
    return rules


ALERT_RULES = _alerts()
BY_NAME = {rule["alert"]: rule for rule in ALERT_RULES}


def test_the_files_exist() -> None:
    assert RULE_FILES, "no alerts/*.rules.yml"
    assert TEST_FILES, "no promtool unit tests in alerts/tests/"


def test_promtool_checks_the_rule_files() -> None:
    result = _run("check", "rules", *(str(p.relative_to(ROOT)) for p in RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    result = _run("test", "rules", *(str(p.relative_to(ROOT)) for p in TEST_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout + result.stderr


def test_every_designed_alert_exists_once() -> None:
    names = [rule["alert"] for rule in ALERT_RULES]
    assert len(names) == len(set(names)), f"an alert is defined twice: {sorted(names)}"
    missing, unexpected = set(IDENTITY) - set(names), set(names) - set(IDENTITY)
    assert not missing and not unexpected, f"missing: {missing}, unexpected: {unexpected}"


@pytest.mark.parametrize("name", sorted(IDENTITY))
def test_severity_annotations_and_runbook_url(name: str) -> None:
    rule = BY_NAME[name]
    assert rule.get("labels", {}).get("severity") in SEVERITIES, rule.get("labels")
    annotations = rule.get("annotations", {})
    assert set(annotations) >= ANNOTATIONS, f"missing annotations: {ANNOTATIONS - set(annotations)}"
    for key in ANNOTATIONS:
        assert str(annotations[key]).strip(), f"empty {key}"
    assert annotations["runbook_url"] == RUNBOOK_URL + name.lower()


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_github_anchor() -> None:
    assert _github_anchor("VolcanoJobFailed") == "volcanojobfailed"
    assert _github_anchor("How to fix: the queue!") == "how-to-fix-the-queue"


def test_runbook_urls_point_at_runbook_sections() -> None:
    headings = re.findall(r"^#{1,6} +(.+?) *$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    anchors = {_github_anchor(h) for h in headings}
    for rule in ALERT_RULES:
        url = rule["annotations"]["runbook_url"]
        assert url.split("#", 1)[1] in anchors, f"{rule['alert']}: no heading for {url} in docs/runbooks.md"
    sections = {h for h in headings if h.startswith("Volcano")}
    assert sections == set(BY_NAME), f"runbook sections without an alert: {sections - set(BY_NAME)}"


# ---- the labels an alert carries --------------------------------------------------------------------

AnyLabels = frozenset[str] | None  # None: every label of the input series (instance, pod, ...) passes


def _is_scalar(node: Any) -> bool:
    if isinstance(node, pp.NumberLiteral):
        return True
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr):
        return _is_scalar(node.expr)
    if isinstance(node, pp.Call):
        return bool(node.func.return_type == pp.ValueType.Scalar)
    if isinstance(node, pp.BinaryExpr):
        return _is_scalar(node.lhs) and _is_scalar(node.rhs)
    return False


def output_labels(node: Any) -> AnyLabels:
    """The label names the result of `node` can carry, following PromQL's rules: aggregations keep their
    `by` labels, `and`/`unless` the left side's, `or` both sides', one-to-one arithmetic and comparisons
    with `on(...)` only those labels, group_left/right one side's plus the included ones."""
    if isinstance(node, pp.NumberLiteral | pp.StringLiteral):
        return frozenset()
    if isinstance(node, pp.VectorSelector | pp.MatrixSelector):
        return None
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        return output_labels(node.expr)
    if isinstance(node, pp.AggregateExpr):
        op = str(node.op)
        if op in ("topk", "bottomk", "limitk", "limit_ratio"):  # these return input series as they are
            return output_labels(node.expr)
        modifier = node.modifier
        if modifier is not None and modifier.type == pp.AggModifierType.Without:
            return None
        grouped = frozenset(modifier.labels) if modifier is not None else frozenset()
        return grouped | {node.param.val} if op == "count_values" else grouped
    if isinstance(node, pp.Call):
        name, args = node.func.name, node.args
        if name in ("absent", "absent_over_time"):  # labels of the selector's equality matchers
            selector = args[0].vector_selector if isinstance(args[0], pp.MatrixSelector) else args[0]
            return frozenset(m.name for m in selector.matchers.matchers if m.op == pp.MatchOp.Equal)
        if node.func.return_type == pp.ValueType.Scalar or name == "vector":
            return frozenset()
        if name in ("label_replace", "label_join"):
            inner = output_labels(args[0])
            return None if inner is None else inner | {args[1].val}
        vectors = [a for a in args if not _is_scalar(a) and not isinstance(a, pp.StringLiteral)]
        return output_labels(vectors[0]) if vectors else frozenset()
    if isinstance(node, pp.BinaryExpr):
        if _is_scalar(node.lhs) or _is_scalar(node.rhs):
            return frozenset() if _is_scalar(node.lhs) and _is_scalar(node.rhs) else output_labels(
                node.rhs if _is_scalar(node.lhs) else node.lhs)
        op, modifier = str(node.op), node.modifier
        left, right = output_labels(node.lhs), output_labels(node.rhs)
        if op == "or":
            return None if left is None or right is None else left | right
        if op in ("and", "unless"):
            return left
        card = modifier.card if modifier is not None else pp.VectorMatchCardinality.OneToOne
        matching = modifier.matching if modifier is not None else None
        included = frozenset(modifier.group_labels or ()) if modifier is not None else frozenset()
        if card == pp.VectorMatchCardinality.ManyToOne:
            return None if left is None else left | included
        if card == pp.VectorMatchCardinality.OneToMany:
            return None if right is None else right | included
        if matching is not None and matching.type == pp.LabelModifierType.Include:  # on(...): only those
            on = frozenset(matching.labels)
            return on if left is None else on & left
        ignored = frozenset(matching.labels) if matching is not None else frozenset()
        return None if left is None else left - ignored
    raise AssertionError(f"output_labels: unhandled node {type(node).__name__}: {node}")


@pytest.mark.parametrize(("expr", "expected"), [
    ("up", None),
    ("sum by (a) (x)", {"a"}),
    ("count without (instance) (x)", None),
    ("max by (a) (x) * on (a) group_left (b) max by (a, b) (y)", {"a", "b"}),
    ("x / on (a) y", {"a"}),
    ("sum by (a, b) (x) > on (a) sum by (a) (y)", {"a"}),
    ("sum by (a) (x) and on (a) y", {"a"}),
    ("sum by (a) (x) or sum by (b) (y)", {"a", "b"}),
    ("time() - max by (a) (x) < 3600", {"a"}),
    ("absent(up{job=~'x'})", set()),
    ("absent(up{job='x'})", {"job"}),
    ("rate(x[5m])", None),
    ("topk(1, sum by (a) (x))", {"a"}),
    ("label_replace(sum by (a) (x), 'b', '$1', 'a', '(.*)')", {"a", "b"}),
])
def test_output_labels(expr: str, expected: set[str] | None) -> None:
    result = output_labels(pp.parse(expr))
    assert result == (None if expected is None else frozenset(expected))


@pytest.mark.parametrize("name", sorted(IDENTITY))
def test_alert_labels_are_the_intended_ones_and_never_a_targets(name: str) -> None:
    rule = BY_NAME[name]
    labels = output_labels(pp.parse(rule["expr"]))
    assert labels is not None, f"{name}: the expression passes every input label through (aggregate with by)"
    assert "instance" not in labels and "instance" not in rule.get("labels", {}), name
    assert labels == IDENTITY[name], f"{name}: labels {sorted(labels)}, intended {sorted(IDENTITY[name])}"
    assert set(rule.get("labels", {})) == {"severity"}, f"{name}: extra static labels {rule.get('labels')}"


def _cluster_blind(node: Any) -> list[str]:
    """The aggregations and `on (...)` joins in `node` that leave `cluster` out: each would merge two
    clusters' series or match one cluster's series with another's. `ignoring (...)` and `without`
    keep it, as long as they do not name it."""
    found: list[str] = []
    if isinstance(node, pp.AggregateExpr):
        modifier = node.modifier
        labels = set(modifier.labels) if modifier is not None else set()
        if (modifier is None or modifier.type == pp.AggModifierType.By) != ("cluster" in labels):
            found.append(str(node))
        found += _cluster_blind(node.expr)
    elif isinstance(node, pp.BinaryExpr):
        matching = node.modifier.matching if node.modifier is not None else None
        if matching is not None and (matching.type == pp.LabelModifierType.Include) != ("cluster" in matching.labels):
            found.append(str(node))
        found += _cluster_blind(node.lhs) + _cluster_blind(node.rhs)
    elif isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        found += _cluster_blind(node.expr)
    elif isinstance(node, pp.Call):
        for arg in node.args:
            found += _cluster_blind(arg)
    return found


@pytest.mark.parametrize(("expr", "blind"), [
    ("sum by (cluster, a) (x) * on (cluster, a) group_left (b) max by (cluster, a, b) (y)", False),
    ("x unless ignoring (state) y", False),
    ("count without (instance) (x)", False),
    ("sum by (a) (x)", True),
    ("sum(x)", True),
    ("x and on (a) y", True),
    ("x unless ignoring (cluster) y", True),
    ("time() - max by (a) (x) < 3600", True),
])
def test_cluster_blind(expr: str, blind: bool) -> None:
    assert bool(_cluster_blind(pp.parse(expr))) == blind


@pytest.mark.parametrize("name", sorted(IDENTITY))
def test_every_aggregation_and_join_keeps_the_cluster(name: str) -> None:
    """Issue 32: several clusters' series in one Prometheus or Thanos, told apart by `cluster`. The
    absent() of VolcanoExporterDown is no aggregation: it sees every cluster at once (docs/runbooks.md)."""
    assert _cluster_blind(pp.parse(BY_NAME[name]["expr"])) == [], name


# ---- the promtool unit tests cover every alert ------------------------------------------------------

def _unit_tests() -> list[dict[str, Any]]:
    groups = []
    for path in TEST_FILES:
        doc = yaml.safe_load(path.read_text())
        assert [str((path.parent / f).resolve()) for f in doc["rule_files"]] == [str(p) for p in RULE_FILES], path
        groups += doc["tests"]
    return groups


UNIT_TESTS = _unit_tests()


def test_unit_test_inputs_look_scraped() -> None:
    """Every input series carries an `instance` label, as every scraped series does, so the expected
    labels (which never include it) prove the rules aggregate the scrape target away."""
    for group in UNIT_TESTS:
        for item in group["input_series"]:
            assert re.search(r"[{,]\s*instance=", item["series"]), item["series"]
        for case in group.get("alert_rule_test", []):
            for alert in case.get("exp_alerts") or []:
                assert "instance" not in alert.get("exp_labels", {}), case


@pytest.mark.parametrize("name", sorted(IDENTITY))
def test_unit_tests_check_the_alert_firing_and_not_firing(name: str) -> None:
    cases = [case for group in UNIT_TESTS for case in group.get("alert_rule_test", []) if case["alertname"] == name]
    quiet = [case for case in cases if not case.get("exp_alerts")]
    firing = [case for case in cases if case.get("exp_alerts")]
    assert quiet, f"{name}: no eval_time at which it must not fire"
    assert firing, f"{name}: no eval_time at which it must fire"
    expected = [alert for case in firing for alert in case["exp_alerts"]]
    for alert in expected:
        assert set(alert["exp_labels"]) - {"severity"} <= IDENTITY[name], (name, alert["exp_labels"])
        assert alert["exp_labels"]["severity"] == BY_NAME[name]["labels"]["severity"], name
        assert set(alert.get("exp_annotations", {})) == ANNOTATIONS, (name, alert.get("exp_annotations"))
    # At least once with every identity label (VolcanoExporterDown's absent() branch has none of them).
    assert any(set(alert["exp_labels"]) == IDENTITY[name] | {"severity"} for alert in expected), name
