"""PodGroup families: gang state (min member, conditions such as Unschedulable/NotEnoughResources)."""

from __future__ import annotations

from exporter.families.base import Family, resource_labels
from exporter.model import PodGroup

GROUP = ("namespace", "podgroup")

INFO = Family("volcano_podgroup_info", "Information about a PodGroup and the job that owns it.",
              (*GROUP, "queue", "job_name", "job_kind", "priority_class"))
PHASE = Family("volcano_podgroup_status_phase", "The PodGroup's current phase (1 for the current one).",
               (*GROUP, "queue", "phase"))
MIN_MEMBER = Family("volcano_podgroup_spec_min_member", "Pods that must be schedulable together.", GROUP)
MIN_RESOURCES = Family("volcano_podgroup_spec_min_resources", "Resources the gang needs to start.",
                       resource_labels(*GROUP))
PODS = Family("volcano_podgroup_status_pods", "The PodGroup's pods by state.", (*GROUP, "state"))
CONDITION = Family("volcano_podgroup_condition", "A condition of the PodGroup (1 while it is reported).",
                   (*GROUP, "type", "status", "reason"))
CONDITION_TIME = Family("volcano_podgroup_condition_last_transition_timestamp_seconds",
                        "Unix time of the condition's last transition.", (*GROUP, "type"))

FAMILIES = (INFO, PHASE, MIN_MEMBER, MIN_RESOURCES, PODS, CONDITION, CONDITION_TIME)


def render(group: PodGroup) -> tuple[str, ...]:
    ns, name = group.namespace, group.name
    key = (ns, name)
    return (
        INFO.line((ns, name, group.queue, group.job_name, group.job_kind, group.priority_class), 1),
        PHASE.line((ns, name, group.queue, group.phase), 1) if group.phase else "",
        MIN_MEMBER.line(key, group.min_member),
        MIN_RESOURCES.resource_lines(key, group.min_resources),
        "".join(PODS.line((ns, name, state), count) for state, count in (
            ("running", group.running), ("succeeded", group.succeeded), ("failed", group.failed))),
        "".join(CONDITION.line((ns, name, c.type, c.status, c.reason), 1) for c in group.conditions),
        "".join(CONDITION_TIME.line((ns, name, c.type), c.last_transition_time)
                for c in group.conditions if c.last_transition_time is not None),
    )
