"""Tests of volcano_monitor.core, the layer the exporter and the watchdog share."""
