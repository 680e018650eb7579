"""`volcano_exporter_*`: how the exporter itself is doing. While the API server is unreachable the
exporter keeps serving the last known state; these say so (state, last event, request errors)."""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from volcano_monitor.core.exposition import COUNTER, Family
from volcano_monitor.core.gpushare import PROBLEM_KINDS, share_problems
from volcano_monitor.core.kube import informer as inf
from volcano_monitor.core.version import version

R = ("resource",)
BUILD_INFO = Family("volcano_exporter_build_info", "Version of the exporter (1).", ("version", "python_version"))
EVENTS = Family("volcano_exporter_events_total", "Watch and list events applied, by resource and type.",
                ("resource", "type"), COUNTER)
RELISTS = Family("volcano_exporter_relists_total",
                 "Full relists after the first (410 Gone, expired continue tokens, recoveries).", R, COUNTER)
DECODE_ERRORS = Family("volcano_exporter_decode_errors_total",
                       "Watch lines or objects that could not be decoded (skipped and counted).", R, COUNTER)
PARSE_PROBLEMS = Family("volcano_exporter_parse_problems_total",
                        "Fields of a wrong type or shape; the object was kept with what could be read.", R, COUNTER)
HANDLER_ERRORS = Family("volcano_exporter_handler_errors_total", "Events whose handling failed.", R, COUNTER)
REQUEST_ERRORS = Family("volcano_exporter_request_errors_total",
                        "Failed requests to the API server, by HTTP code or 'connection'.", ("resource", "code"),
                        COUNTER)
OBJECTS = Family("volcano_exporter_objects", "Objects held in the informer cache (this shard).", R)
SYNCED = Family("volcano_exporter_synced",
                "1 once the first full list of the resource has been applied, or when the kind is optional and "
                "settled: not served (404, its CRD is not installed; state not_found) or not granted (403; state "
                "forbidden). 0 while a kind is still to be listed: a served kind stuck at 0 is a problem.", R)
STATE = Family("volcano_exporter_informer_state",
               "The informer's state (1 for the current one): starting, listing, watching, backoff, forbidden, "
               "not_found, stopped.",
               ("resource", "state"))
SERVED = Family("volcano_exporter_resource_served",
                "1 while the API server serves the resource and it is listed; 0 while its CRD is missing (404: kinds "
                "only some Volcano releases have, such as cronjobs, hypernodes, jobflows) or before its first list (so "
                "also while RBAC does not grant it: 403).", R)
LAST_EVENT = Family("volcano_exporter_last_event_timestamp_seconds", "Unix time of the last event applied.", R)
DROPPED = Family("volcano_exporter_objects_dropped_total",
                 "Objects refused series because their kind reached --max-objects (each counted once).", R,
                 COUNTER)
SCRAPE_SECONDS = Family("volcano_exporter_scrape_duration_seconds",
                        "Seconds the previous /metrics response took to assemble.", ())
SCRAPES = Family("volcano_exporter_scrapes_total", "Responses served on /metrics.", (), COUNTER)
GPU_SHARE_PROBLEMS = Family(
    "volcano_exporter_gpu_share_problems_total",
    "Bad input met while computing physical GPUs of shared-GPU requests (docs/gpu-sharing.md), by kind, each time "
    "a pod or job is parsed: " + ", ".join(PROBLEM_KINDS) + ". A fallback was used (logged once per kind).",
    ("problem",), COUNTER)

FAMILIES = (BUILD_INFO, EVENTS, RELISTS, DECODE_ERRORS, PARSE_PROBLEMS, HANDLER_ERRORS, REQUEST_ERRORS, OBJECTS,
            SYNCED, SERVED, STATE, LAST_EVENT, DROPPED, SCRAPE_SECONDS, SCRAPES, GPU_SHARE_PROBLEMS)

# When one resource has several informers (one per namespace), the worst state speaks for it.
_SEVERITY = [inf.FORBIDDEN, inf.NOT_FOUND, inf.BACKOFF, inf.STARTING, inf.LISTING, inf.STOPPED, inf.WATCHING]


def render(informers: Sequence[inf.Informer[Any]], parse_problems: dict[str, int], scrape_seconds: float,
           scrapes: int, dropped: dict[str, int] | None = None, *,
           settled: Callable[[inf.Informer[Any]], bool]) -> str:
    """The self-metrics text. `settled` is the exporter's own readiness test of one informer
    (`Exporter.settled`): `volcano_exporter_synced` says what /readyz says, decided in one place."""
    by_resource: dict[str, list[inf.Informer[Any]]] = {}
    for informer in informers:
        by_resource.setdefault(informer.kind.name, []).append(informer)
    out = [BUILD_INFO.header, BUILD_INFO.line((version(), platform.python_version()), 1)]
    sections: dict[Family, list[str]] = {f: [] for f in FAMILIES[1:]}
    for resource, group in sorted(by_resource.items()):
        events: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for informer in group:
            events.update(informer.events)
            errors.update(informer.request_errors)
        for event_type in (inf.ADDED, inf.MODIFIED, inf.DELETED):
            sections[EVENTS].append(EVENTS.line((resource, event_type), events[event_type]))
        sections[RELISTS].append(RELISTS.line((resource,), sum(i.relists for i in group)))
        sections[DECODE_ERRORS].append(DECODE_ERRORS.line((resource,), sum(i.decode_errors for i in group)))
        plural = resource.split(".")[0]
        sections[PARSE_PROBLEMS].append(PARSE_PROBLEMS.line((resource,), parse_problems.get(plural, 0)))
        sections[HANDLER_ERRORS].append(HANDLER_ERRORS.line((resource,), sum(i.handler_errors for i in group)))
        for code, count in sorted(errors.items()):
            sections[REQUEST_ERRORS].append(REQUEST_ERRORS.line((resource, code), count))
        sections[OBJECTS].append(OBJECTS.line((resource,), sum(len(i.cache) for i in group)))
        sections[SYNCED].append(SYNCED.line((resource,), int(all(settled(i) for i in group))))
        sections[SERVED].append(SERVED.line(
            (resource,), int(all(i.synced.is_set() and i.state != inf.NOT_FOUND for i in group))))
        state = min((i.state for i in group), key=_SEVERITY.index)
        sections[STATE].append(STATE.line((resource, state), 1))
        last = max((i.last_event_time or 0.0 for i in group), default=0.0)
        if last:
            sections[LAST_EVENT].append(LAST_EVENT.line((resource,), last))
        sections[DROPPED].append(DROPPED.line((resource,), (dropped or {}).get(plural, 0)))
    sections[SCRAPE_SECONDS].append(SCRAPE_SECONDS.line((), scrape_seconds))
    sections[SCRAPES].append(SCRAPES.line((), scrapes))
    problems = share_problems()
    for kind in (*PROBLEM_KINDS, *sorted(set(problems) - set(PROBLEM_KINDS))):
        sections[GPU_SHARE_PROBLEMS].append(GPU_SHARE_PROBLEMS.line((kind,), problems.get(kind, 0)))
    for family, lines in sections.items():
        if lines:
            out.append(family.header)
            out.extend(lines)
    return "".join(out)
