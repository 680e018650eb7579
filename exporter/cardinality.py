"""What the exporter serves, for clusters where everything would be too much: kube-state-metrics' knobs.

- `--metric-allowlist` / `--metric-denylist`: families by exact name or regular expression (anchored, as
  kube-state-metrics does), mutually exclusive. A denied family is neither stored nor served.
- `--metric-labels-allowlist pods=[team,app],jobs=[*]`: Kubernetes labels of pods and Volcano Jobs copied
  onto `volcano_pod_info` / `volcano_job_info` as `label_<name>`, names sanitized and collisions suffixed
  `_conflictN` exactly like kube-state-metrics, so joins written for `kube_pod_labels` carry over.
- `--max-objects 50000` or `pods=100000,jobs=5000`: at most that many objects of a kind get series; the
  rest are counted (`volcano_exporter_objects_dropped_total`) and logged, never a crash or an OOM-sized
  /metrics.

Every parser raises `ValueError` with a message naming the flag; cli.py turns that into exit code 2.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from volcano_monitor.core.exposition import escape

log = logging.getLogger("volcano-exporter")

# The kinds the exporter renders, by their plural (the names kube-state-metrics uses in its flags).
KINDS = ("jobs", "podgroups", "pods", "queues", "cronjobs", "hypernodes", "jobflows")
LABEL_KINDS = ("jobs", "pods")  # kinds whose info family takes --metric-labels-allowlist labels

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_LABELS_ITEM = re.compile(r"\s*([a-z]+)\s*=\s*\[([^\[\]]*)\]\s*(?:,|$)")


@dataclass(frozen=True)
class FamilyFilter:
    """Which families are served: all, an allowlist, or all but a denylist (patterns fully anchored)."""

    allow: tuple[re.Pattern[str], ...] | None = None
    deny: tuple[re.Pattern[str], ...] = ()

    def allows(self, name: str) -> bool:
        if self.allow is not None:
            return any(p.fullmatch(name) for p in self.allow)
        return not any(p.fullmatch(name) for p in self.deny)

    def unmatched(self, names: Iterable[str]) -> list[str]:
        """Patterns that select no family (most likely typos; logged at start)."""
        known = list(names)
        patterns = self.allow if self.allow is not None else self.deny
        return [p.pattern for p in patterns if not any(p.fullmatch(n) for n in known)]


def _patterns(text: str, flag: str) -> tuple[re.Pattern[str], ...]:
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            out.append(re.compile(item))
        except re.error as exc:
            raise ValueError(f"{flag}: {item!r} is not a valid regular expression ({exc})") from None
    return tuple(out)


def family_filter(allowlist: str, denylist: str) -> FamilyFilter:
    allow, deny = allowlist.strip(), denylist.strip()
    if allow and deny:
        raise ValueError("--metric-allowlist and --metric-denylist are mutually exclusive")
    if allow:
        patterns = _patterns(allow, "--metric-allowlist")
        if not patterns:
            raise ValueError("--metric-allowlist: no family named")
        return FamilyFilter(allow=patterns)
    return FamilyFilter(deny=_patterns(deny, "--metric-denylist"))


@dataclass(frozen=True)
class LabelsAllowlist:
    """Kubernetes label keys to copy per kind; `None` as a kind's keys means all (`[*]`)."""

    kinds: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)

    def wants(self, kind: str) -> bool:
        return kind in self.kinds

    def select(self, kind: str, raw: object) -> tuple[tuple[str, str], ...]:
        """`(label_<sanitized key>, value)` pairs for the object's labels this kind allows, in key order.
        Malformed metadata or non-string values are skipped (the model reports them)."""
        if kind not in self.kinds or type(raw) is not dict:
            return ()
        meta = raw.get("metadata")
        labels = meta.get("labels") if type(meta) is dict else None
        if type(labels) is not dict or not labels:
            return ()
        keys = self.kinds[kind]
        chosen = {k: v for k, v in labels.items() if type(k) is str and type(v) is str
                  and (keys is None or k in keys)}
        return prometheus_labels(chosen)


def prometheus_labels(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """kube-state-metrics' mapping: sorted keys, `label_` + key with invalid characters as `_`; keys that
    sanitize to the same name all get `_conflict1`, `_conflict2`, ... in key order."""
    names = [(key, "label_" + _INVALID.sub("_", key)) for key in sorted(labels)]
    seen: dict[str, int] = {}
    for _, name in names:
        seen[name] = seen.get(name, 0) + 1
    counter: dict[str, int] = {}
    out = []
    for key, name in names:
        if seen[name] > 1:
            counter[name] = counter.get(name, 0) + 1
            name = f"{name}_conflict{counter[name]}"
        out.append((name, labels[key]))
    return tuple(out)


def labels_allowlist(text: str) -> LabelsAllowlist:
    """Parse `pods=[team,app.kubernetes.io/name],jobs=[*]` (kube-state-metrics' syntax)."""
    text = text.strip()
    kinds: dict[str, tuple[str, ...] | None] = {}
    pos = 0
    while pos < len(text):
        match = _LABELS_ITEM.match(text, pos)
        if match is None:
            raise ValueError(f"--metric-labels-allowlist: cannot parse {text[pos:]!r}; expected e.g. "
                             "pods=[team,app],jobs=[*]")
        kind, keys_text = match.groups()
        if kind not in LABEL_KINDS:
            raise ValueError(f"--metric-labels-allowlist: unknown kind {kind!r} (one of {', '.join(LABEL_KINDS)})")
        keys = tuple(k.strip() for k in keys_text.split(",") if k.strip())
        if not keys:
            raise ValueError(f"--metric-labels-allowlist: no label named for {kind}")
        kinds[kind] = None if "*" in keys else keys
        pos = match.end()
    return LabelsAllowlist(kinds)


def max_objects(text: str) -> dict[str, int]:
    """`N` (every kind) or `pods=N,jobs=M,...`; empty means no cap. N must be a positive integer."""
    text = text.strip()
    if not text:
        return {}
    if "=" not in text:
        return dict.fromkeys(KINDS, _positive(text, "--max-objects"))
    out = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        kind, sep, number = item.partition("=")
        kind = kind.strip()
        if not sep or kind not in KINDS:
            raise ValueError(f"--max-objects: {item!r} is not KIND=N with KIND one of {', '.join(KINDS)}")
        out[kind] = _positive(number, f"--max-objects {kind}")
    return out


def _positive(text: str, flag: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected a positive integer, got {text.strip()!r}") from None
    if value < 1:
        raise ValueError(f"{flag}: expected a positive integer, got {value}")
    return value


@dataclass(frozen=True)
class Options:
    """What to serve (defaults: everything, as before these flags existed)."""

    compat_ksm_fork: bool = False
    families: FamilyFilter = FamilyFilter()
    labels: LabelsAllowlist = LabelsAllowlist()
    max_objects: Mapping[str, int] = field(default_factory=dict)


def extra_label_text(pairs: tuple[tuple[str, str], ...]) -> str:
    """`,label_team="a",label_app="b"` with values escaped, to splice into an info line."""
    return "".join(f',{name}="{escape(value)}"' for name, value in pairs)


def with_labels(line: str, pairs: tuple[tuple[str, str], ...]) -> str:
    """An info line (`name{...} 1\\n`) with `pairs` added after its own labels."""
    if not pairs or not line:
        return line
    end = line.rindex("} ")
    return line[:end] + extra_label_text(pairs) + line[end:]


class ObjectCaps:
    """`--max-objects` bookkeeping (the store calls it under its lock): which objects were refused series,
    and how many per kind. A refused object is admitted on a later event once its kind is under the cap
    again; its key is kept meanwhile, so each object counts once however often it changes."""

    def __init__(self, limits: Mapping[str, int], clock: Callable[[], float] = time.monotonic,
                 log_interval: float = 60.0) -> None:
        self.limits = dict(limits)
        self.dropped: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._refused: dict[str, set[str]] = {kind: set() for kind in KINDS}
        self._clock = clock
        self._log_interval = log_interval
        self._logged: dict[str, float] = {}

    def admit(self, kind: str, key: str, known: bool, tracked: int) -> bool:
        """May `key` (which has series already if `known`) have series, `tracked` objects of its kind having them?"""
        limit = self.limits.get(kind)
        if limit is None:
            return True
        refused = self._refused[kind]
        if known or tracked < limit:
            refused.discard(key)
            return True
        if key not in refused:
            refused.add(key)
            self.dropped[kind] += 1
            now = self._clock()
            if now - self._logged.get(kind, -self._log_interval) >= self._log_interval:
                self._logged[kind] = now
                log.warning("--max-objects: %d %s have series, the cap; %s/%s and %d more get none "
                            "(%d refused so far, volcano_exporter_objects_dropped_total)",
                            tracked, kind, kind, key, len(refused) - 1, self.dropped[kind])
        return False

    def forget(self, kind: str, key: str) -> None:
        """The object was deleted."""
        self._refused[kind].discard(key)

    def refused(self, kind: str) -> int:
        return len(self._refused[kind])


ALL = FamilyFilter()
DEFAULTS = Options()
