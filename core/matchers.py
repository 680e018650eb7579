"""Label matchers in Alertmanager's syntax (`severity="critical"`, `queue=~"team-.*"`), anchored as there.

They sit below everything that uses them: the notification settings validate routes and silences with
`parse_matcher`, routing and silences match alerts with `Matcher.matches`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Matcher", "parse_matcher"]

_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^"\s]*))\s*$')


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # = != =~ !~
    value: str
    pattern: re.Pattern[str] | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        assert self.pattern is not None
        found = self.pattern.fullmatch(actual) is not None  # anchored, as in Alertmanager
        return found if self.op == "=~" else not found

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.name}{self.op}"{escaped}"'


def parse_matcher(text: str) -> Matcher:
    """`severity="critical"`, `queue=~"team-.*"`, `namespace!=kube-system`; ValueError naming the text."""
    found = _MATCHER.match(text) if isinstance(text, str) else None
    if not found:
        raise ValueError(f'bad matcher {text!r}: expected name="value", name!="value", name=~"regex" or name!~"regex"')
    name, op, quoted, bare = found.groups()
    value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
    pattern = None
    if op in ("=~", "!~"):
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ValueError(f"bad regex in matcher {text!r}: {exc}") from None
    return Matcher(name, op, value, pattern)
