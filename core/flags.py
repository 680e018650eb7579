"""Command-line flags that also read an environment variable, shared by every volcano-monitor command.

DESIGN §6: every flag has an environment variable, and bad values give one clear line and exit 2.
argparse runs `type` over string defaults too, so a bad environment value fails exactly like a bad
flag, naming the flag.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def env_flag(parser: argparse.ArgumentParser, flag: str, env: str, *, default: Any = None,
             help: str, **kwargs: Any) -> None:
    value = os.environ.get(env)
    shown = "" if default is None else f" (default: {default})"
    parser.add_argument(flag, default=value if value not in (None, "") else default,
                        help=f"{help}{shown} [env {env}]", **kwargs)


def kubeconfig_flag(parser: argparse.ArgumentParser, env_prefix: str) -> None:
    env_flag(parser, "--kubeconfig", f"{env_prefix}_KUBECONFIG",
             help="kubeconfig file; otherwise $KUBECONFIG, the in-cluster service account, ~/.kube/config")


def log_level_flag(parser: argparse.ArgumentParser, env_prefix: str) -> None:
    env_flag(parser, "--log-level", f"{env_prefix}_LOG_LEVEL", default="INFO",
             choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level")


def host_port(text: str) -> tuple[str, int]:
    """Parse HOST:PORT (IPv6 as [::1]:PORT); an empty host means all interfaces."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number in {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return host, port


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def boolean(text: str | bool) -> bool:
    """true/false (also 1/0, yes/no, on/off), for flags that an environment variable can set too."""
    if isinstance(text, bool):
        return text
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h|d|w))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: Any) -> float:
    """Seconds from `30s` / `1h30m` / a number; ValueError naming the value otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and _DURATION.match(value.strip()):
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(value.strip()))
    elif isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"not a duration (like 30s, 5m, 4h): {value!r}") from None
    else:
        raise ValueError(f"not a duration: {value!r}")
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"duration must be >= 0: {value!r}")
    return seconds
