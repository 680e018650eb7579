"""The chart grants `create` on TokenReviews and SubjectAccessReviews exactly when the watchdog authorizes
readers with Kubernetes RBAC — as the watchdog itself reads `auth.mode` from the rendered config and its
environment — or when told to (`watchdog.rbac.createReviews`, for a config the chart cannot see)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import one, render
from tests.deploy.test_chart import WATCHDOG_RULES, granted, watchdog_settings

CREATE_REVIEWS = {("authentication.k8s.io", "tokenreviews", "create"),
                  ("authorization.k8s.io", "subjectaccessreviews", "create")}
MODE_ENV = "watchdog.extraEnv[0].name=VOLCANO_WATCHDOG_AUTH__MODE"


@pytest.mark.parametrize(("sets", "mode"), [
    ((), "token"),
    (("watchdog.config.auth.mode=token",), "token"),
    (("watchdog.config.auth.mode=kubernetes",), "kubernetes"),
    (("watchdog.config.auth.mode=kubernetes", "watchdog.config.auth.trusted_proxies[0]=10.0.0.0/8"), "kubernetes"),
    ((MODE_ENV, "watchdog.extraEnv[0].value=kubernetes"), "kubernetes"),
    (("watchdog.config.auth.mode=kubernetes", MODE_ENV, "watchdog.extraEnv[0].value=token"), "token"),
], ids=["default", "token", "kubernetes", "with-proxies", "env-on", "env-off"])
def test_reviews_are_granted_exactly_when_the_mode_is_kubernetes(sets: tuple[str, ...], mode: str,
                                                                 tmp_path: Path) -> None:
    docs = render(sets=sets)
    expected = WATCHDOG_RULES | (CREATE_REVIEWS if mode == "kubernetes" else set())
    assert granted(one(docs, "ClusterRole", "-watchdog")) == expected
    assert watchdog_settings(docs, tmp_path).auth.mode == mode


def test_reviews_with_an_existing_config_secret_need_rbac_create_reviews() -> None:
    unseen = render(sets=("watchdog.existingConfigSecret=my-config", "watchdog.config.auth.mode=kubernetes"))
    assert granted(one(unseen, "ClusterRole", "-watchdog")) == WATCHDOG_RULES
    told = render(sets=("watchdog.existingConfigSecret=my-config", "watchdog.rbac.createReviews=true"))
    assert granted(one(told, "ClusterRole", "-watchdog")) == WATCHDOG_RULES | CREATE_REVIEWS
