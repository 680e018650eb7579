from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from volcano_monitor.core.kube.config import ClusterConfigError, api_client, load_configuration
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_explicit_kubeconfig_reaches_the_server(sim: SimulatorThread, tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    write_kubeconfig(path, sim.url)
    versions = client.CoreApi(api_client(str(path))).get_api_versions()
    assert versions.versions == ["v1"]


def test_kubeconfig_env_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    write_kubeconfig(path, "http://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{path}")
    assert load_configuration().host == "http://127.0.0.1:1"
    monkeypatch.delenv("KUBECONFIG")
    home = tmp_path / "home" / ".kube"
    home.mkdir(parents=True)
    write_kubeconfig(home / "config", "http://127.0.0.1:2")
    assert load_configuration().host == "http://127.0.0.1:2"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("::: not yaml", "cannot use kubeconfig"),
        ("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n", "cannot use kubeconfig"),
    ],
)
def test_broken_kubeconfig_is_one_clear_line(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ClusterConfigError) as error:
        load_configuration(str(path))
    assert expected in str(error.value) and "\n" not in str(error.value)


def test_nothing_configured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError, match="no cluster configuration"):
        load_configuration()
    with pytest.raises(ClusterConfigError, match="does not exist"):
        load_configuration(str(tmp_path / "nope"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(ClusterConfigError, match="KUBECONFIG names no existing file"):
        load_configuration()


def test_in_cluster_without_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ClusterConfigError, match="in-cluster configuration failed"):
        load_configuration()
