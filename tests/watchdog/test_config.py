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


def test_the_issues_costs_shape_works_as_written(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("costs:\n  currency: USD\n  prices:            # per hour: cpu per core, memory per GiB, a GPU\n"
                    "    cpu: 0.04\n    memory: 0.005\n    nvidia.com/gpu: 2.5\n"
                    "  gpu_models: {NVIDIA-A100-SXM4-80GB: 4.1}\n"
                    "  node_pools:\n    - node_selector: {cloud.google.com/gke-spot: 'true'}\n"
                    "      prices: {cpu: 0.012}\n")
    costs = load(path, environ={}).costs
    assert costs.currency == "USD" and costs.prices == {"cpu": 0.04, "memory": 0.005, "nvidia.com/gpu": 2.5}
    assert costs.gpu_models == {"NVIDIA-A100-SXM4-80GB": 4.1}
    assert costs.node_pools[0].node_selector == {"cloud.google.com/gke-spot": "true"}
    assert costs.node_pools[0].prices == {"cpu": 0.012}


@pytest.mark.parametrize(("text", "message"), [
    ("costs: {prices: {cpu: -0.04}}", "costs.prices: the price of cpu must be a finite number >= 0"),
    ("costs: {prices: {cpu: cheap}}", "costs.prices.cpu: Input should be a valid number"),
    ("costs: {prices: {cpu: .nan}}", "costs.prices: the price of cpu must be a finite number >= 0"),
    ("costs: {prices: {cpu: true}}", "costs.prices.cpu: a price must be a number, not true"),
    ("costs: {prices: {cores: 1}}", "costs.prices: 'cores' is not a priced resource"),
    ("costs: {prices: [0.04]}", "costs.prices: Input should be a valid dictionary"),
    ("costs: {price: {cpu: 1}}", "costs.price: Extra inputs are not permitted"),
    ("costs: {currency: dollars}", "costs.currency: must be a three-letter ISO 4217 code"),
    ("costs: {gpu_models: {A100: -4}}", "costs.gpu_models: the price of a GPU of model A100 must be a finite number"),
    ("costs: {node_pools: [{node_selector: {pool: spot}, prices: {memory: -1}}]}",
     "costs.node_pools.0.prices: the price of memory must be a finite number >= 0"),
    ("costs: {node_pools: [{node_selector: {}, prices: {cpu: 1}}]}", "costs.node_pools.0.node_selector"),
    ("costs: {node_pools: [{prices: {cpu: 1}}]}", "costs.node_pools.0.node_selector: Field required"),
])
def test_bad_prices_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                           message: str) -> None:
    from volcano_monitor.watchdog.runtime.cli import main

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load(path, environ={})
    assert message in str(error.value) and "\n" not in str(error.value)
    assert main(["--config", str(path), "report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_gpu_sharing_reaches_the_share_computation_at_start(tmp_path: Path) -> None:
    """`gpu_sharing` is handed to core.gpushare when the CLI starts, before any pod is parsed; a bad basis or
    card size is one line naming the key, exit 2."""
    import subprocess
    import sys

    path = tmp_path / "c.yaml"
    path.write_text(f"database_url: sqlite:///{tmp_path / 'w.db'}\n"
                    "gpu_sharing: {basis: cores, card_memory_mib: 40960}\n")
    settings = load(path, environ={"VOLCANO_WATCHDOG_GPU_SHARING__BASIS": "memory"})
    assert (settings.gpu_sharing.basis, settings.gpu_sharing.card_memory_mib) == ("memory", 40960)
    # A MiB-only vGPU of 10240 MiB and 100 % of the cores: 0.25 of a 40 GiB card on the memory basis, 1 on cores.
    probe = ("from volcano_monitor.watchdog.runtime import cli; from volcano_monitor.core import gpushare; "
             "import sys; cli.main(['--config', sys.argv[1], 'migrate']); "
             "print(gpushare.container_share({'nvidia.com/gpu': 1, 'nvidia.com/gpumem': 10240, "
             "'nvidia.com/gpucores': 100}).gpus)")
    for basis, expected in (("memory", "0.25"), ("cores", "1.0")):
        done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "VOLCANO_WATCHDOG_GPU_SHARING__BASIS": basis})
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == expected, (basis, done.stdout)
    path.write_text("gpu_sharing: {basis: biggest}\n")
    with pytest.raises(ConfigError, match=r"gpu_sharing\.basis") as error:
        load(path, environ={})
    assert "\n" not in str(error.value)
    path.write_text("gpu_sharing: {card_memory_mib: -1}\n")
    with pytest.raises(ConfigError, match=r"gpu_sharing\.card_memory_mib"):
        load(path, environ={})
