"""Usage and failure reports from the job ledger and the alerts: `volcano-watchdog report`, the HTML
report the API serves, and scheduled digests through the notification routes."""
