"""PodGroup families: gang state (min member, conditions such as Unschedulable/NotEnoughResources)."""

from __future__ import annotations

from volcano_monitor.core.exposition import Family, resource_labels
from volcano_monitor.core.kinds import CONDITION_REASONS, OTHER_REASON, condition_reason
from volcano_monitor.core.model import PodGroup

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

# Added by later releases: absent for PodGroups that do not carry the fields.
CONDITION_REASON = Family(
    "volcano_podgroup_status_condition_reason",
    "Why the PodGroup cannot run (1 per condition that holds, Scheduled aside): reason is one of "
    f"{', '.join(CONDITION_REASONS)} or {OTHER_REASON}, so `count by (queue, reason)` stays bounded.",
    (*GROUP, "queue", "type", "reason"))
TOPOLOGY = Family("volcano_podgroup_spec_network_topology_info",
                  "The PodGroup's network topology constraint (spec.networkTopology, v1.12+): mode hard|soft and "
                  "highest_tier_name (v1.14+, empty when not set).", (*GROUP, "mode", "highest_tier_name"))
HIGHEST_TIER = Family("volcano_podgroup_spec_network_topology_highest_tier_allowed",
                      "Highest HyperNode tier the gang may span (spec.networkTopology.highestTierAllowed).", GROUP)
SUBGROUP_SIZE = Family("volcano_podgroup_spec_subgroup_size",
                       "Pods per sub-group of a spec.subGroupPolicy entry (v1.14+).", (*GROUP, "subgroup"))
SUBGROUP_MIN = Family("volcano_podgroup_spec_subgroup_min_subgroups",
                      "Sub-groups that must be placed for the gang to run "
                      "(spec.subGroupPolicy[].minSubGroups, v1.14+).",
                      (*GROUP, "subgroup"))

FAMILIES = (INFO, PHASE, MIN_MEMBER, MIN_RESOURCES, PODS, CONDITION, CONDITION_TIME, CONDITION_REASON, TOPOLOGY,
            HIGHEST_TIER, SUBGROUP_SIZE, SUBGROUP_MIN)


def render(group: PodGroup) -> tuple[str, ...]:
    ns, name = group.namespace, group.name
    key = (ns, name)
    topology = group.network_topology
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
        "".join(CONDITION_REASON.line((ns, name, group.queue, c.type, condition_reason(c.reason)), 1)
                for c in group.conditions if c.status == "True" and c.type != "Scheduled"),
        TOPOLOGY.line((ns, name, topology.mode, topology.highest_tier_name), 1) if topology is not None else "",
        HIGHEST_TIER.line(key, topology.highest_tier_allowed)
        if topology is not None and topology.highest_tier_allowed is not None else "",
        "".join(SUBGROUP_SIZE.line((ns, name, sub.name), sub.size) for sub in group.subgroups if sub.size is not None),
        "".join(SUBGROUP_MIN.line((ns, name, sub.name), sub.min_subgroups)
                for sub in group.subgroups if sub.min_subgroups is not None),
    )
