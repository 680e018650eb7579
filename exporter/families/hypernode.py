"""HyperNode families (`topology.volcano.sh` HyperNode, v1.12+, cluster-scoped: shard 0 only): the
network topology tree network-aware gangs (PodGroup spec.networkTopology) are placed in."""

from __future__ import annotations

from volcano_monitor.core.exposition import Family
from volcano_monitor.core.kinds import HyperNode

H = ("hypernode",)

INFO = Family("volcano_hypernode_info",
              "Information about a HyperNode: its tier and tier name (spec.tierName, v1.14+; empty when absent).",
              ("hypernode", "tier", "tier_name"))
TIER = Family("volcano_hypernode_spec_tier", "The HyperNode's tier (1 is the nearest to the nodes).", H)
MEMBERS = Family("volcano_hypernode_spec_members", "Members of the HyperNode by type (Node or HyperNode).",
                 ("hypernode", "type"))
NODES = Family("volcano_hypernode_status_nodes", "Nodes under the HyperNode (status.nodeCount).", H)

FAMILIES = (INFO, TIER, MEMBERS, NODES)


def render(node: HyperNode) -> tuple[str, ...]:
    name = node.name
    return (
        INFO.line((name, str(node.tier), node.tier_name), 1),
        TIER.line((name,), node.tier),
        "".join(MEMBERS.line((name, kind), count) for kind, count in node.members),
        NODES.line((name,), node.node_count) if node.node_count is not None else "",
    )
