"""What one API request is about (its `Target`: kind, namespace, name, subresource, watch or not) and the
faults tests inject into the answers (`Faults`): shared by the routes (simulator.server) and the watch
streams (simulator.watch), so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from volcano_monitor.simulator.resources import ResourceType


@dataclass
class Faults:
    """Faults injected into API responses; tests set these over HTTP or directly."""

    delay_seconds: float = 0.0  # added before every resource request
    error_count: int = 0  # the next N resource requests answer `error_code`
    error_code: int = 500
    error_resource: str = ""  # plural the errors apply to ("" = any)
    forbidden: list[str] = field(default_factory=list)  # plurals answering 403
    malformed_lines: int = 0  # the next N watch events are sent as garbage lines
    truncate_streams: int = 0  # the next N watch events are cut mid-line, then the stream closes
    drop_generation: int = 0  # bumping it closes every open watch stream
    watch_list: bool = True  # the WatchList feature gate (on in Kubernetes 1.32, off by default in 1.33)

    def take_error(self, plural: str) -> int | None:
        if self.error_count > 0 and self.error_resource in ("", plural):
            self.error_count -= 1
            return self.error_code
        return None


@dataclass
class Target:
    rtype: ResourceType
    namespace: str | None  # None: all namespaces (or cluster-scoped)
    name: str | None
    subresource: str
    watch: bool
