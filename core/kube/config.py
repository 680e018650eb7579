"""Cluster access for the exporter and the watchdog: kubeconfig or in-cluster service account.

The order is client-go's: an explicit --kubeconfig, then $KUBECONFIG, then the pod's service
account when running in a cluster, then ~/.kube/config. When none works, one `ClusterConfigError`
line says what was tried, so the CLI can print it and exit without a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class ClusterConfigError(Exception):
    """No usable cluster configuration; the message is one line meant for the user."""


def _from_kubeconfig(path: str, context: str | None, settings: client.Configuration) -> None:
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=settings, persist_config=False
        )
    except (ConfigException, OSError, ValueError, TypeError, KeyError, yaml.YAMLError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterConfigError(f"cannot use kubeconfig {path}: {detail}") from exc


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> client.Configuration:
    settings = client.Configuration()
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise ClusterConfigError(f"kubeconfig {kubeconfig} does not exist or is not a file")
        _from_kubeconfig(kubeconfig, context, settings)
        return settings
    env_paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if env_paths:
        existing = [p for p in env_paths if Path(p).is_file()]
        if not existing:
            raise ClusterConfigError(f"KUBECONFIG names no existing file: {os.environ['KUBECONFIG']}")
        _from_kubeconfig(existing[0], context, settings)
        return settings
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=settings)  # type: ignore[no-untyped-call]
            return settings
        except ConfigException as exc:
            raise ClusterConfigError(f"in-cluster configuration failed: {exc}") from exc
    default = Path.home() / ".kube" / "config"
    if default.is_file():
        _from_kubeconfig(str(default), context, settings)
        return settings
    raise ClusterConfigError(
        "no cluster configuration: pass --kubeconfig PATH, set KUBECONFIG, create ~/.kube/config, "
        "or run in a pod with a service account"
    )


def current_context(kubeconfig: str | None = None) -> str | None:
    """The current context's name of the kubeconfig `load_configuration` would read (None in a pod or
    without one): a default name for the cluster."""
    paths = [kubeconfig] if kubeconfig else [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not paths and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        paths = [str(Path.home() / ".kube" / "config")]
    for path in paths:
        if Path(path).is_file():
            try:
                _, active = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
            except (ConfigException, OSError, ValueError, TypeError, AttributeError):
                return None
            name = active.get("name") if isinstance(active, dict) else None
            return name if isinstance(name, str) else None
    return None


class ClusterClient(client.ApiClient):
    """An ApiClient that can read its credentials again.

    Projected service-account tokens rotate (hourly by default) and kubeconfig tokens get replaced; the
    official client re-reads the in-cluster token only once a minute, and a kubeconfig's never. On an
    HTTP 401 the informers call `reload_credentials` and retry at once (see `Informer`)."""

    def __init__(self, settings: client.Configuration, kubeconfig: str | None, context: str | None) -> None:
        super().__init__(settings)
        self._source = (kubeconfig, context)
        self.credential_reloads = 0

    def reload_credentials(self) -> None:
        """Load the configuration the same way as at start and take its credentials (bearer token,
        basic auth, the refresh hook); TLS settings stay as they are. Raises ClusterConfigError."""
        fresh = load_configuration(*self._source)
        settings = self.configuration
        settings.api_key = dict(fresh.api_key)
        settings.api_key_prefix = dict(fresh.api_key_prefix)
        settings.refresh_api_key_hook = fresh.refresh_api_key_hook
        settings.username, settings.password = fresh.username, fresh.password
        self.credential_reloads += 1


def api_client(kubeconfig: str | None = None, context: str | None = None, pool_size: int = 16) -> ClusterClient:
    """An ApiClient whose connection pool fits one long-lived watch per informer plus requests."""
    settings = load_configuration(kubeconfig, context)
    settings.connection_pool_maxsize = pool_size
    return ClusterClient(settings, kubeconfig, context)
