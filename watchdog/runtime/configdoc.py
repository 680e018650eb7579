"""docs/configuration.md, generated from the settings models: `python -m volcano_monitor.watchdog.runtime.configdoc`."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, SecretStr

from volcano_monitor.watchdog.config import ENV_PREFIX, Settings

INTRO = """# Watchdog configuration

Generated from `watchdog/config.py` and the settings modules it gathers by
`python -m volcano_monitor.watchdog.runtime.configdoc > docs/configuration.md`; a test fails when it is out of date.

Settings come from a YAML file (`--config FILE`), then `VOLCANO_WATCHDOG_*` environment variables,
then command-line flags, each overriding the one before. Nested keys are written with dots in this
table, as nested mappings in the file, and with `__` in the environment:

```yaml
database_url: postgresql+psycopg://watchdog@db/watchdog
detectors:
  idle_window_seconds: 900
```

is `VOLCANO_WATCHDOG_DATABASE_URL=...` and `VOLCANO_WATCHDOG_DETECTORS__IDLE_WINDOW_SECONDS=900`.
An unknown key or an invalid value stops the watchdog with one line naming the key (exit code 2).
"""


def _default(value: Any) -> str:
    if isinstance(value, SecretStr):
        return "(secret)"
    if value is None:
        return "(unset)"
    return f"`{json.dumps(value)}`"


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.append(f"| **{key}** | | | {' '.join((annotation.__doc__ or '').split())} |")
            rows.extend(_rows(annotation, key + "."))
            continue
        env = ENV_PREFIX + key.upper().replace(".", "__")
        default = field.get_default(call_default_factory=True)
        rows.append(f"| `{key}` | {_default(default)} | `{env}` | {field.description or ''} |")
    return rows


def render() -> str:
    table = ["| key | default | environment | meaning |", "|---|---|---|---|", *_rows(Settings)]
    return INTRO + "\n" + "\n".join(table) + "\n"


if __name__ == "__main__":
    print(render(), end="")
