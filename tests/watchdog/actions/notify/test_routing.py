from __future__ import annotations

import pytest

from volcano_monitor.core.flags import parse_duration
from volcano_monitor.core.matchers import parse_matcher
from volcano_monitor.watchdog.actions.notify.routing import group_key, match_routes, resolve_tree
from volcano_monitor.watchdog.config import ConfigError, load


def settings(route: dict, receivers: tuple[str, ...] = ("default", "gpu-team", "oncall")):  # type: ignore[no-untyped-def]
    return load(None, environ={}, notifications={
        "receivers": [{"name": n, "webhook": {"url": f"http://127.0.0.1:1/{n}"}} for n in receivers],
        "route": route}).notifications


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ('severity="critical"', {"severity": "critical"}, True),
    ('severity="critical"', {"severity": "warning"}, False),
    ("severity=critical", {"severity": "critical"}, True),
    ('queue=~"team-.*"', {"queue": "team-a"}, True),
    ('queue=~"team"', {"queue": "team-a"}, False),  # anchored, as in Alertmanager
    ('queue!~"team-.*"', {"queue": "research"}, True),
    ('namespace!="kube-system"', {}, True),  # a missing label is the empty string
    ('namespace=""', {}, True),
    ('summary="say \\"hi\\""', {"summary": 'say "hi"'}, True),
])
def test_matchers(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_matcher(text).matches(labels) is expected


@pytest.mark.parametrize("text", ["severity", "=x", 'a=~"("', "a ~ b", "1abc=x", ""])
def test_bad_matchers_name_the_problem(text: str) -> None:
    with pytest.raises(ValueError, match="matcher"):
        parse_matcher(text)


def test_tree_first_match_continue_and_inheritance() -> None:
    tree = resolve_tree(settings({
        "receiver": "default", "group_by": ["alertname"], "group_wait": "10s", "repeat_interval": "1h",
        "routes": [
            {"matchers": ['severity="critical"'], "receiver": "oncall", "continue": True, "group_wait": 0},
            {"matchers": ['queue=~"gpu-.*"'], "receiver": "gpu-team", "group_by": ["..."]},
            {"matchers": ['queue=~"gpu-.*"'], "receiver": "oncall"},  # shadowed: the previous one does not continue
        ]}).route)
    critical_gpu = match_routes(tree, {"severity": "critical", "queue": "gpu-a", "alertname": "JobFailed"})
    assert [(r.path, r.receiver) for r in critical_gpu] == [("0.0", "oncall"), ("0.1", "gpu-team")]
    assert critical_gpu[0].group_wait == 0 and critical_gpu[0].repeat_interval == 3600  # own / inherited
    assert critical_gpu[1].group_wait == 10 and critical_gpu[1].group_by == ("...",)
    assert [r.receiver for r in match_routes(tree, {"severity": "info", "queue": "prod"})] == ["default"]


def test_group_keys_follow_group_by() -> None:
    tree = resolve_tree(settings({"receiver": "default", "group_by": ["alertname", "queue"]}).route)
    a = group_key(tree, {"alertname": "JobFailed", "queue": "prod", "job_name": "a"})
    b = group_key(tree, {"alertname": "JobFailed", "queue": "prod", "job_name": "b"})
    c = group_key(tree, {"alertname": "JobFailed", "queue": "research", "job_name": "a"})
    assert a.key == b.key != c.key and a.group_labels == {"alertname": "JobFailed", "queue": "prod"}
    every = resolve_tree(settings({"receiver": "default", "group_by": ["..."]}).route)
    assert group_key(every, {"x": "1", "y": "2"}).group_labels == {"x": "1", "y": "2"}


@pytest.mark.parametrize(("given", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), (12, 12), ("2.5", 2.5),
                                                ("500ms", 0.5), ("1d", 86400)])
def test_durations(given: object, seconds: float) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize(("route", "receivers", "message"), [
    ({"receiver": "nobody"}, ("default",), "route.receiver: no receiver named 'nobody'"),
    ({"receiver": "default", "routes": [{"receiver": "x"}]}, ("default",), r"route.routes\[0\].receiver"),
    ({"receiver": "default", "matchers": ["severity~x"]}, ("default",), "bad matcher"),
    ({"receiver": "default", "group_wait": "soon"}, ("default",), "not a duration"),
    ({}, ("default",), "root route needs a receiver"),
    ({"receiver": "default"}, ("default", "default"), "receiver names must be unique"),
])
def test_bad_route_configuration_is_one_clear_line(route: dict, receivers: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        settings(route, receivers)
    assert "\n" not in str(caught.value) and "127.0.0.1:1" not in str(caught.value)


def test_receiver_needs_exactly_one_channel_and_url_stays_secret() -> None:
    with pytest.raises(ConfigError, match="exactly one of"):
        load(None, environ={}, notifications={"receivers": [{"name": "r", "slack": {"url": "https://h/T/B/s3cr3t"},
                                                              "teams": {"url": "https://h/t"}}],
                                               "route": {"receiver": "r"}})
    with pytest.raises(ConfigError) as caught:
        load(None, environ={}, notifications={"receivers": [{"name": "r", "slack": {"url": 5}}],
                                              "route": {"receiver": "r"}})
    assert "s3cr3t" not in str(caught.value)
    ok = load(None, environ={}, notifications={"receivers": [{"name": "r", "slack": {"url": "https://h/T/B/s3cr3t"}}],
                                               "route": {"receiver": "r"}})
    assert "s3cr3t" not in repr(ok) and "s3cr3t" not in str(ok.model_dump())
