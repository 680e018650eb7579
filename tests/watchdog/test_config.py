from __future__ import annotations

from pathlib import Path

import pytest

from volcano_monitor.watchdog.config import ConfigError, load
from volcano_monitor.watchdog.runtime import configdoc

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_defaults_are_usable() -> None:
    settings = load(environ={})
    assert settings.database_url.startswith("sqlite:///")
    assert settings.sources.metrics_api.enabled and not settings.sources.prometheus.enabled
    assert settings.recommendations.safety_margin == 0.15


def test_layers_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "watchdog.yaml"
    path.write_text("listen: 127.0.0.1:1\ndetectors:\n  idle_window_seconds: 100\n  idle_cpu_ratio: 0.2\n"
                    "sources:\n  rollup_seconds: 50\n  prometheus: {enabled: true, url: 'http://prom:9090'}\n")
    env = {"VOLCANO_WATCHDOG_DETECTORS__IDLE_WINDOW_SECONDS": "200", "VOLCANO_WATCHDOG_LISTEN": "127.0.0.1:2",
           "VOLCANO_WATCHDOG_NAMESPACES": "a,b", "VOLCANO_WATCHDOG_LOG_LEVEL": "DEBUG", "OTHER": "x"}
    settings = load(path, environ=env, listen="127.0.0.1:3", database_url=None)
    assert settings.listen == "127.0.0.1:3"  # flag over environment over file
    assert settings.detectors.idle_window_seconds == 200  # environment over file
    assert settings.detectors.idle_cpu_ratio == 0.2  # file over default
    assert settings.sources.prometheus.url == "http://prom:9090" and settings.namespaces == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("detectors: {idle_cpu_ratio: 3}", {}, "detectors.idle_cpu_ratio"),
        ("detectors: {idle_cpu_ratoi: 0.1}", {}, "detectors.idle_cpu_ratoi: Extra inputs are not permitted"),
        ("database_url: mysql://x", {}, "database_url"),
        ("listen: nowhere", {}, "listen: expected HOST:PORT"),
        ("detectors: {idle_window_seconds: 60}", {},
         "detectors.idle_window_seconds (60) must be at least twice sources.rollup_seconds (300)"),
        ("sources: {rollup_seconds: 30}\ndetectors: {idle_window_seconds: 50}", {},
         "detectors.idle_window_seconds (50) must be at least twice sources.rollup_seconds (30)"),
        ("sources: {rollup_seconds: 70}", {}, "sources.rollup_seconds: must divide 3600"),
        ("sources: {rollup_seconds: 0}", {}, "sources.rollup_seconds"),
        ("- a list", {}, "must hold a mapping"),
        ("a: [unclosed", {}, "not valid YAML"),
        ("", {"VOLCANO_WATCHDOG_SOURCES__PROMETHEUS__RATE_WINDOW": "5 minutes"}, "sources.prometheus.rate_window"),
        ("", {"VOLCANO_WATCHDOG_RETENTION__USAGE_DAYS": "-1"}, "retention.usage_days"),
    ],
)
def test_invalid_configuration_is_one_line_naming_the_key(tmp_path: Path, text: str, env: dict[str, str],
                                                          message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load(path, environ=env)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path / "nope.yaml", environ={})


def test_secrets_do_not_show(tmp_path: Path) -> None:
    settings = load(environ={"VOLCANO_WATCHDOG_API_TOKEN": "s3cret"})
    assert settings.api_token is not None and settings.api_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())


def test_configuration_doc_is_current() -> None:
    assert DOC.read_text() == configdoc.render(), (
        "docs/configuration.md is stale: run "
        "`.venv/bin/python -m volcano_monitor.watchdog.runtime.configdoc > docs/configuration.md`")
    for key in ("detectors.gang_unschedulable_seconds", "recommendations.oom_bump_ratio", "retention.usage_days"):
        assert f"`{key}`" in DOC.read_text()
