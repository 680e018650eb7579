"""Grafana dashboards for volcano-monitor, built with Grafana's foundation SDK.

The committed `dashboards/*.json` files are the product (imported into Grafana or shipped as sidecar
ConfigMaps); this package is how they are written, so a change to a query is a reviewed code change and
`python -m volcano_monitor.dashboards.generate --check` tells when the JSON and the code disagree.
"""
