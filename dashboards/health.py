"""volcano-monitor health: is the monitoring itself working? Scrape targets, the exporter's informers
(sync, relists, errors, objects, /metrics time) and the watchdog's database, leadership, collectors,
alerts and notification outbox.

Values the watchdog reads from its shared database (alerts, outbox, dead letters) are the same on every
replica, so they are taken once per label set (`max by`); per-process counters are summed."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from volcano_monitor.dashboards.common import (
    CLUSTER,
    Column,
    Panel,
    Query,
    build_dashboard,
    cluster_variable,
    datasource_variable,
    query_variable,
    stat_panel,
    table_panel,
    timeseries_panel,
)

UID = "volcano-monitor-health"
TITLE = "volcano-monitor health"
RATE = "[$__rate_interval]"
# Prometheus' own scrape-job label of our targets, found through the build-info series they serve.
EXPORTER_UP = f'up{{{CLUSTER}, job=~"$exporter_scrape_job"}}'
WATCHDOG_UP = f'up{{{CLUSTER}, job=~"$watchdog_scrape_job"}}'
ALERTS = f"max by (cluster, kind, severity, state) (volcano_watchdog_alerts{{{CLUSTER}}})"
BAD = ((None, "red"), (1, "green"))
# A kind the API server does not serve (its CRD not installed: CronJob before Volcano v1.13, HyperNode
# before v1.12, JobFlow without its chart) is settled, not broken, on such a release. The exporter
# reports it synced; exporters from before that did not, so, as VolcanoExporterNotSynced does
# (alerts/), not_found is left out per replica, and the 404 the informer gets on each minute's retry
# is not drawn as an error.
NOT_SERVED = f'volcano_exporter_informer_state{{{CLUSTER}, state="not_found"}} == 1'
NOT_SYNCED = f"count(volcano_exporter_synced{{{CLUSTER}}} == 0 unless ignoring (state) {NOT_SERVED})"
REQUEST_ERRORS = (f"sum by (cluster, resource, code) (rate(volcano_exporter_request_errors_total{{{CLUSTER}}}{RATE}) "
                  f'unless ignoring (state) label_replace({NOT_SERVED}, "code", "404", "", ""))')
# Informer states in fixed colours: not_found (not served) is neutral, not a palette colour that may be red.
STATE_COLOURS = {"watching": "green", "not_found": "blue", "starting": "yellow", "listing": "yellow",
                 "backoff": "orange", "forbidden": "red", "stopped": "purple"}


def _targets() -> list[Panel]:
    return [
        stat_panel("Exporters up", "Exporter targets Prometheus scrapes successfully.",
                   [Query(f"sum({EXPORTER_UP})")], steps=BAD),
        stat_panel("Watchdogs up", "Watchdog targets Prometheus scrapes successfully.",
                   [Query(f"sum({WATCHDOG_UP})")], steps=BAD),
        stat_panel("Informers not synced", "Exporter informers (per replica) still to apply their first full "
                   "list: a required kind forbidden, or a served kind whose list fails. Kinds the API server does "
                   "not serve, and optional kinds RBAC does not grant, are settled and not counted (as in the "
                   "VolcanoExporterNotSynced alert).",
                   [Query(NOT_SYNCED)], steps=((None, "green"), (1, "red"))),
        stat_panel("Watchdog database", "1 when every watchdog replica could read its database at the last scrape.",
                   [Query(f"min(volcano_watchdog_database_up{{{CLUSTER}}})")], steps=BAD, no_value="-"),
        stat_panel("Watchdog ready", "1 when every watchdog replica is ready (caches synced, database migrated).",
                   [Query(f"min(volcano_watchdog_ready{{{CLUSTER}}})")], steps=BAD, no_value="-"),
        stat_panel("Watchdog leaders", "Replicas holding the leader Lease: exactly 1 is healthy (0: nobody sends "
                   "messages or patches queues).",
                   [Query(f"sum(volcano_watchdog_leader{{{CLUSTER}}})")],
                   steps=((None, "red"), (1, "green"), (2, "red"))),
        timeseries_panel("Targets up", "Scrape health of each exporter and watchdog replica (Prometheus `up`).",
                         [Query(EXPORTER_UP, "exporter {{instance}}"), Query(WATCHDOG_UP, "watchdog {{instance}}")]),
        table_panel("Versions", "Version of each running replica.",
                    [Column(Query("max by (cluster, instance, version, python_version) "
                                  f"(volcano_exporter_build_info{{{CLUSTER}}})",
                                  "exporter")),
                     Column(Query("max by (cluster, instance, version, python_version) "
                                  f"(volcano_watchdog_build_info{{{CLUSTER}}})",
                                  "watchdog"))],
                    width=12),
    ]


def _states() -> Panel:
    return timeseries_panel(
        "Informers by state", "Exporter informers by state: watching is healthy; listing, backoff or forbidden "
        "need a look. not_found is a kind the API server does not serve: expected for CronJob before Volcano "
        "v1.13, HyperNode before v1.12 and JobFlow without its chart; for pods, Jobs, PodGroups or Queues it "
        "means Volcano's CRDs are missing (the exporter then stays unready).",
        [Query(f"sum by (cluster, state) (volcano_exporter_informer_state{{{CLUSTER}}})", "{{state}}")],
        width=8, stacked=True, colours=STATE_COLOURS)


def _exporter() -> list[Panel]:
    return [
        _states(),
        timeseries_panel("Objects cached", "Objects in each informer's cache, all shards.",
                         [Query(f"sum by (cluster, resource) (volcano_exporter_objects{{{CLUSTER}}})", "{{resource}}")],
                         width=8),
        timeseries_panel("Watch events applied", "Events per second, by resource.",
                         [Query(f"sum by (cluster, resource) (rate(volcano_exporter_events_total{{{CLUSTER}}}{RATE}))",
                                "{{resource}}")],
                         unit="ops", width=8),
        timeseries_panel("Relists", "Full relists after the first one (410 Gone, expired continue tokens, recovery).",
                         [Query("sum by (cluster, resource) "
                                f"(increase(volcano_exporter_relists_total{{{CLUSTER}}}{RATE}))", "{{resource}}")],
                         width=8, bars=True),
        timeseries_panel("Errors", "Per second: undecodable watch lines or objects, fields of the wrong shape, "
                         "failed handlers, failed API requests (by HTTP code; not the 404s of a kind the API "
                         "server does not serve, retried every minute).",
                         [Query("sum by (cluster, resource) "
                                f"(rate(volcano_exporter_decode_errors_total{{{CLUSTER}}}{RATE}))",
                                "decode {{resource}}"),
                          Query("sum by (cluster, resource) "
                                f"(rate(volcano_exporter_parse_problems_total{{{CLUSTER}}}{RATE}))",
                                "parse {{resource}}"),
                          Query("sum by (cluster, resource) "
                                f"(rate(volcano_exporter_handler_errors_total{{{CLUSTER}}}{RATE}))",
                                "handler {{resource}}"),
                          Query(REQUEST_ERRORS, "request {{resource}} {{code}}")], unit="ops", width=8),
        timeseries_panel("Seconds since the last event", "Per resource; grows while nothing changes or the watch "
                         "is stuck.",
                         [Query("time() - max by (cluster, resource) "
                                f"(volcano_exporter_last_event_timestamp_seconds{{{CLUSTER}}})",
                                "{{resource}}")], unit="s", width=8),
        timeseries_panel("/metrics assembly time", "Seconds the previous /metrics response took, per replica.",
                         [Query(f"max by (cluster, instance) (volcano_exporter_scrape_duration_seconds{{{CLUSTER}}})",
                                "{{instance}}")],
                         unit="s"),
        timeseries_panel("/metrics responses", "Responses per second, per replica.",
                         [Query("sum by (cluster, instance) "
                                f"(rate(volcano_exporter_scrapes_total{{{CLUSTER}}}{RATE}))", "{{instance}}")],
                         unit="ops"),
    ]


def _watchdog() -> list[Panel]:
    return [
        timeseries_panel("Collectors up", "1 when an enabled usage collector succeeded recently, per replica.",
                         [Query(f"max by (cluster, instance, collector) (volcano_watchdog_collector_up{{{CLUSTER}}}) "
                                "and on(cluster, instance, collector) "
                                f"volcano_watchdog_collector_enabled{{{CLUSTER}}} == 1",
                                "{{collector}} {{instance}}")],
                         width=6),
        timeseries_panel("Seconds since a collector succeeded", "Age of each collector's last successful round.",
                         [Query("time() - max by (cluster, collector) "
                                f"(volcano_watchdog_collector_last_success_timestamp_seconds{{{CLUSTER}}})",
                                "{{collector}}")],
                         unit="s", width=6),
        timeseries_panel("Usage samples collected", "Samples per second, by collector.",
                         [Query("sum by (cluster, collector) "
                                f"(rate(volcano_watchdog_collector_samples_total{{{CLUSTER}}}{RATE}))",
                                "{{collector}}")], unit="ops", width=6),
        timeseries_panel("Collector errors", "Failed collection rounds or responses per interval.",
                         [Query("sum by (cluster, collector) "
                                f"(increase(volcano_watchdog_collector_errors_total{{{CLUSTER}}}{RATE}))",
                                "{{collector}}")], width=6, bars=True),
        timeseries_panel("Firing alerts by kind", "Alerts the watchdog is firing, by kind.",
                         [Query("sum by (cluster, kind) (max by (cluster, kind, severity, state) "
                                f'(volcano_watchdog_alerts{{{CLUSTER}, state="firing"}}))', "{{kind}}")], stacked=True),
        timeseries_panel("Unresolved alerts by severity and state", "Pending (waiting out their `for`) and firing "
                         "alerts by severity.",
                         [Query(f"sum by (cluster, severity, state) ({ALERTS})", "{{severity}} {{state}}")],
                         stacked=True),
    ]


def _notifications() -> list[Panel]:
    return [
        timeseries_panel("Notifications by outcome", "Delivery attempts per interval: sent, failed (retried), dead "
                         "(gave up), uncertain (crash between send and mark).",
                         [Query("sum by (cluster, outcome) "
                                f"(increase(volcano_watchdog_notifications_total{{{CLUSTER}}}{RATE}))",
                                "{{outcome}}")], width=8, bars=True),
        timeseries_panel("Outbox pending", "Messages waiting in the outbox, by receiver.",
                         [Query("max by (cluster, receiver) "
                                f"(volcano_watchdog_notification_outbox_pending{{{CLUSTER}}})", "{{receiver}}")],
                         width=8),
        timeseries_panel("Oldest pending message", "Age of the oldest message waiting, by receiver.",
                         [Query("max by (cluster, receiver) "
                                f"(volcano_watchdog_notification_outbox_oldest_age_seconds{{{CLUSTER}}})",
                                "{{receiver}}")], unit="s", width=8),
        timeseries_panel("Dead letters", "Messages given up after every retry (listed by the watchdog API).",
                         [Query("max by (cluster, receiver) "
                                f"(volcano_watchdog_notification_dead_letters{{{CLUSTER}}})", "{{receiver}}")],
                         width=8),
        timeseries_panel("Failed deliveries by receiver", "Attempts that did not succeed, per receiver and outcome.",
                         [Query(f'sum by (cluster, receiver, outcome) (increase(volcano_watchdog_notifications_total'
                                f'{{{CLUSTER}, outcome!="sent"}}{RATE}))', "{{receiver}} {{outcome}}")], width=8,
                         bars=True),
        timeseries_panel("Queue capability changes", "The watchdog's capability plans by queue and outcome.",
                         [Query("sum by (cluster, queue, outcome) "
                                f"(increase(volcano_watchdog_queue_capability_updates_total{{{CLUSTER}}}"
                                f"{RATE}))", "{{queue}} {{outcome}}")], width=8, bars=True),
    ]


def build() -> Dashboard:
    return build_dashboard(
        UID, TITLE, "The exporter's informers and /metrics, the watchdog's database, leader, collectors, alerts and "
        "notifications.",
        [datasource_variable(), cluster_variable(),
         query_variable("exporter_scrape_job", "Exporter scrape job",
                        f"label_values(volcano_exporter_build_info{{{CLUSTER}}}, job)", multi=True, all_value=None),
         query_variable("watchdog_scrape_job", "Watchdog scrape job",
                        f"label_values(volcano_watchdog_build_info{{{CLUSTER}}}, job)", multi=True, all_value=None)],
        [("Targets", _targets()),
         ("Exporter", _exporter()),
         ("Watchdog", _watchdog()),
         ("Notifications", _notifications())])
