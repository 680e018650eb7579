"""Metric families, one module per kind: each maps an object to its rendered rows."""
