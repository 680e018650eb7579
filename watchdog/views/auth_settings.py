"""Settings of who may read what (`auth:`): today's tokens only, or each caller's own Kubernetes RBAC.

With `mode: kubernetes` the UI and every read of the API ask the API server who the caller is (TokenReview
of its bearer token, or the user and groups a trusted authenticating proxy such as oauth2-proxy puts in
headers) and which namespaces it may `list` Volcano jobs in (SubjectAccessReview), as kube-rbac-proxy
does; the answers are cached for `cache_ttl_seconds`, so a revoked binding stops working that much later.
Writes keep the `api_token` guard in either mode.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator

from volcano_monitor.core.settings import Section

_HEADER = r"^[A-Za-z0-9-]+$"


class AuthSettings(Section):
    """Who may read: `token` (every GET open, people's data behind `api_read_token`) or `kubernetes`."""

    mode: Literal["token", "kubernetes"] = Field(
        default="token",
        description="`token`: today's behaviour (reads open, writes need `api_token`). `kubernetes`: every read "
                    "of the UI and API takes the caller's identity (TokenReview of a bearer token, or a trusted "
                    "proxy's headers) and shows only the namespaces it may list Volcano jobs in "
                    "(SubjectAccessReview); docs/auth.md.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="CIDRs of authenticating proxies (oauth2-proxy) whose user and groups headers are believed; "
                    "from any other peer address those headers are ignored. Empty: no proxy is trusted.")
    user_header: str = Field(default="X-Forwarded-User", pattern=_HEADER,
                             description="Header in which a trusted proxy names the user.")
    groups_header: str = Field(default="X-Forwarded-Groups", pattern=_HEADER,
                               description="Header in which a trusted proxy lists the user's groups (comma-separated; "
                                           "the header may repeat).")
    cache_ttl_seconds: float = Field(default=30.0, gt=0, le=3600,
                                     description="Seconds a TokenReview or SubjectAccessReview answer is reused.")
    review_timeout_seconds: float = Field(default=5.0, gt=0, le=60,
                                          description="Seconds to wait for the API server's review answer (then 503).")
    verb: str = Field(default="list", min_length=1, description="Verb asked of SubjectAccessReview per namespace.")
    group: str = Field(default="batch.volcano.sh", description="API group of the resource asked about.")
    resource: str = Field(default="jobs", min_length=1, description="Resource asked about (Volcano jobs).")

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        """The environment gives one string (`VOLCANO_WATCHDOG_AUTH__TRUSTED_PROXIES=10.0.0.0/8,fd00::/8`)."""
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    @field_validator("trusted_proxies")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for i, cidr in enumerate(value):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"item {i}: {cidr!r} is not an address or CIDR") from None
        return value

    def trusted(self, address: str | None) -> bool:
        """Whether a request's peer address is one of the trusted proxies'."""
        if not address:
            return False
        try:
            peer = ipaddress.ip_address(address)
        except ValueError:
            return False
        if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
            peer = peer.ipv4_mapped
        return any(peer in ipaddress.ip_network(cidr, strict=False) for cidr in self.trusted_proxies)
