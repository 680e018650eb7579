"""What the exporter and the watchdog share: cluster access (`kube`: configuration, resource kinds, the
informer), the object model read from Volcano and Kubernetes objects (`model`, `podview`, `kinds`,
`podrequests`, `quantity`, `fields`), why a job waits (`pending`), the text exposition format
(`exposition`), retry pacing (`backoff`), command-line flags, memory tuning and the version.

Nothing here imports the exporter or the watchdog."""
