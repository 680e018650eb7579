"""volcano-monitor's import package.

The repository keeps one top-level folder per part (core/, exporter/, watchdog/, simulator/,
dashboards/); this package links them under one name of its own, so an installed wheel puts only
`volcano_monitor` on the import path and never collides with PyPI's `watchdog` (file-system events)
or any other top-level `exporter`/`simulator`. Import them as `volcano_monitor.<part>`:

- `core`: what both programs share: cluster access (kube/), the informer, the object model,
  quantities, flags, backoff, the text exposition format;
- `exporter`: the Prometheus exporter;
- `watchdog`: usage, history, alerts, recommendations, capability control;
- `simulator`: a simulated Volcano cluster for demos and tests;
- `dashboards`: the Grafana dashboards' generator.
"""
