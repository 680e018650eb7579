"""Shared pytest configuration."""

from __future__ import annotations

import os

from hypothesis import settings

# Property-based test budgets: "ci" (default) is thorough and deterministic in time (no deadline);
# "dev" is quick for local edit-test loops. Select with HYPOTHESIS_PROFILE=dev.
settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile("long", max_examples=2000, deadline=None)  # on demand: HYPOTHESIS_PROFILE=long
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
