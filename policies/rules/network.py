"""Network isolation: every pod behind an ingress and an egress NetworkPolicy, no policy rule open
to every source or destination, and no Service that publishes the stack's pods outside the
cluster.

A pod that no NetworkPolicy selects accepts and opens connections to and from anything, and a
rule without peers (or with `namespaceSelector: {}`, or `0.0.0.0/0`, written as one block or as
several that add up to it) makes a policy decorative.
DNS is the one thing every pod needs outside its namespace: egress to kube-system on port 53.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import PolicyResource, ResourceValidationArgs, StackValidationArgs

from contract.workload_shapes import NAMESPACE_NAME_LABEL

from .config import MANDATORY, resource_rule, stack_rule
from .manifests import (
    NETWORK_POLICY,
    SERVICE,
    get,
    items,
    label,
    namespace_of,
    pod_labels,
)
from .messages import show, violation
from .stack_view import StackView, selects

INGRESS, EGRESS = "Ingress", "Egress"
INTERNAL_SERVICE_TYPES = ("ClusterIP",)
_PEERS = {INGRESS: ("ingress", "from"), EGRESS: ("egress", "to")}
_DNS_RULE = (
    "to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, "
    "podSelector: {matchLabels: {k8s-app: kube-dns}}}] on port 53 (UDP and TCP)"
)

Finding = tuple[str, str | None]


def _requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    key = get(requirement, "key")
    operator = get(requirement, "operator")
    values = {str(v) for v in items(requirement, "values")}
    if operator == "In":
        return key in labels and str(labels[key]) in values
    if operator == "NotIn":
        return key not in labels or str(labels[key]) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def label_selector_matches(selector: Any, labels: Mapping[str, Any]) -> bool:
    """A `LabelSelector` as NetworkPolicies read it: `{}` selects every pod."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = get(selector, "matchLabels", default={})
    return all(labels.get(k) == v for k, v in match_labels.items()) and all(
        _requirement_matches(r, labels) for r in items(selector, "matchExpressions")
    )


def _is_empty_selector(selector: Any) -> bool:
    """A selector present with no labels and no expressions: it selects everything."""
    return (
        isinstance(selector, Mapping)
        and not get(selector, "matchLabels", default={})
        and not items(selector, "matchExpressions")
    )


def policy_types(props: Mapping[str, Any]) -> set[str]:
    """The directions a NetworkPolicy restricts (absent: Ingress, and Egress if it has rules)."""
    declared = items(props, "spec", "policyTypes")
    if declared:
        return {str(t) for t in declared}
    return {INGRESS} | ({EGRESS} if items(props, "spec", "egress") else set())


def policies_selecting(view: StackView, workload: PolicyResource) -> list[PolicyResource]:
    """The NetworkPolicies of the workload's namespace whose podSelector selects its pods."""
    labels = pod_labels(workload.resource_type, workload.props)
    namespace = namespace_of(workload.props)
    return [
        p
        for p in view.of_type(NETWORK_POLICY)
        if namespace_of(p.props) == namespace
        and label_selector_matches(get(p.props, "spec", "podSelector"), labels)
    ]


def check_coverage(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Every workload's pods are selected by an Ingress and an Egress NetworkPolicy."""
    view = StackView(args.resources)
    for workload in view.workloads():
        covered = set().union(*(policy_types(p.props) for p in policies_selecting(view, workload)))
        for direction in (INGRESS, EGRESS):
            if direction in covered:
                continue
            if direction == INGRESS:
                what, verb, dns = "who may connect to its pods", "accept connections from", ""
            else:
                what, verb, dns = (
                    "whom they may reach",
                    "open connections to",
                    f"; DNS goes {_DNS_RULE}",
                )
            yield (
                violation(
                    label(workload.resource_type, workload.props),
                    f"{direction} NetworkPolicy",
                    f"absent (no policy with policyTypes [{direction}] selects its pods)",
                    f"an {direction} NetworkPolicy whose podSelector selects its pods",
                    f"declare {what} in a NetworkPolicy (policyTypes: [{direction}]): without "
                    f"one, its pods {verb} any pod or address, so one compromised pod reaches "
                    f"everything{dns}",
                ),
                workload.urn,
            )


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _network(peer: Any) -> Network | None:
    """A peer's ipBlock CIDR (None: no ipBlock, or a malformed CIDR, which the API server
    refuses)."""
    cidr = get(peer, "ipBlock", "cidr")
    if cidr is None:
        return None
    try:
        return ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return None


def _selects_every_namespace(selector: Any) -> bool:
    """Whether a namespace selector narrows nothing: no label to match, no `In`, no `Exists`
    but on the label every namespace has (`NotIn`, `DoesNotExist`: every namespace but some)."""
    if not isinstance(selector, Mapping) or get(selector, "matchLabels", default={}):
        return False
    for requirement in items(selector, "matchExpressions"):
        operator, key = get(requirement, "operator"), get(requirement, "key")
        if operator == "In" or (operator == "Exists" and key != NAMESPACE_NAME_LABEL):
            return False
    return True


def _spell(selector: Any) -> str:
    """A selector as a message shows it: `{}`, `{app: x}`, `{key Exists}`."""
    parts = [f"{k}: {v}" for k, v in get(selector, "matchLabels", default={}).items()]
    for requirement in items(selector, "matchExpressions"):
        values = ",".join(str(v) for v in items(requirement, "values"))
        parts.append(
            " ".join(
                str(x) for x in (get(requirement, "key"), get(requirement, "operator"), values) if x
            )
        )
    return "{" + ", ".join(parts) + "}"


def _open_peer(peer: Any, every_port: bool) -> str | None:
    """Why a peer admits every address or every pod of the cluster (None: it names its peers)."""
    if not isinstance(peer, Mapping) or not any(get(peer, k) is not None for k in peer):
        return "{} (every address)"
    block = _network(peer)
    if block is not None and block.prefixlen == 0:
        return f"ipBlock {get(peer, 'ipBlock', 'cidr')} (every address)"
    namespaces, pods = get(peer, "namespaceSelector"), get(peer, "podSelector")
    if _selects_every_namespace(namespaces):
        spelled = _spell(namespaces)
        if pods is None or _is_empty_selector(pods):
            return (
                f"namespaceSelector {spelled} without a podSelector (every pod of every namespace)"
            )
        # Whoever may create a pod anywhere gives it these labels.
        return (
            f"namespaceSelector {spelled} (every namespace) with podSelector {_spell(pods)}, "
            "labels any pod of any namespace may carry"
        )
    if namespaces is None and _is_empty_selector(pods) and every_port:
        return "podSelector {} (every pod of the namespace), on every port"
    return None


# A rule's ports, one key each (protocol, port, endPort); a rule without ports covers them all.
PortKey = tuple[str, str, str]
ALL_PORTS: PortKey = ("", "", "")


def _port_keys(rule: Mapping[str, Any]) -> list[PortKey]:
    return [
        (
            str(get(p, "protocol", default="TCP")),
            show(get(p, "port", default="all")),
            show(get(p, "endPort", default="")),
        )
        for p in items(rule, "ports")
    ] or [ALL_PORTS]


def _blocks(rule: Mapping[str, Any], peers_key: str) -> list[Network]:
    """The rule's ipBlock CIDRs (an `except` narrows a block by what it names; a block with one
    is still judged whole here, as a literal /0 with one is)."""
    return [b for peer in items(rule, peers_key) if (b := _network(peer)) is not None]


def _every_address(blocks: list[Network]) -> str | None:
    """The family whose whole address space the blocks cover together ("IPv4", "IPv6")."""
    for version, family in ((4, "IPv4"), (6, "IPv6")):
        same = [b for b in blocks if b.version == version]
        collapsed = list(ipaddress.collapse_addresses(same))  # type: ignore[type-var]
        if len(collapsed) == 1 and collapsed[0].prefixlen == 0:
            return family
    return None


def open_by_union(
    rules: list[Mapping[str, Any]], peers_key: str
) -> Iterator[tuple[str, str, list[str]]]:
    """(family, ports, blocks) for each port the rules together open to every address of a
    family, though no single block is /0: `0.0.0.0/1` plus `128.0.0.0/1` is `0.0.0.0/0`."""
    by_port: dict[PortKey, list[Network]] = {}
    for rule in rules:
        for key in _port_keys(rule):
            by_port.setdefault(key, []).extend(_blocks(rule, peers_key))
    every_port = by_port.get(ALL_PORTS, [])
    for key, blocks in sorted(by_port.items()):
        union = blocks if key == ALL_PORTS else [*blocks, *every_port]
        if any(b.prefixlen == 0 for b in union):
            continue  # a literal /0: reported per peer
        family = _every_address(union)
        if family is not None:
            yield family, _show_ports([key]), sorted({str(b) for b in union})


def _show_ports(keys: list[PortKey]) -> str:
    """`port 9092/TCP, 9093/TCP`, or `every port`."""
    if keys == [ALL_PORTS]:
        return "every port"
    return f"port {', '.join(f'{port}/{protocol}' for protocol, port, _ in keys)}"


def _ports(rule: Mapping[str, Any]) -> str:
    return _show_ports(_port_keys(rule))


def check_open_rules(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """No ingress rule open to every source, no egress rule open to every destination."""
    if args.resource_type != NETWORK_POLICY:
        return
    subject = label(args.resource_type, args.props)
    for direction, (rules_key, peers_key) in _PEERS.items():
        if direction not in policy_types(args.props):
            continue
        noun = "source" if direction == INGRESS else "destination"
        required = (
            f"named {noun}s: a podSelector, a namespaceSelector with labels, or an ipBlock "
            "narrower than /0"
        )
        fix = (
            f"name the {noun}s (the pods by their labels, their namespace by "
            "kubernetes.io/metadata.name)"
            + (f"; DNS goes {_DNS_RULE}" if direction == EGRESS else "")
            + ": a rule open to all makes the policy decorative for its ports"
        )
        for i, rule in enumerate(items(args.props, "spec", rules_key)):
            field = f"spec.{rules_key}[{i}].{peers_key}"
            peers = items(rule, peers_key)
            if not peers:
                yield violation(
                    subject, field, f"absent (every {noun}, on {_ports(rule)})", required, fix
                )
            for j, peer in enumerate(peers):
                reason = _open_peer(peer, _port_keys(rule) == [ALL_PORTS])
                if reason is not None:
                    yield violation(
                        subject, f"{field}[{j}]", f"{reason}, on {_ports(rule)}", required, fix
                    )
        rules = [r for r in items(args.props, "spec", rules_key) if isinstance(r, Mapping)]
        for family, port, blocks in open_by_union(rules, peers_key):
            yield violation(
                subject,
                f"spec.{rules_key}",
                f"ipBlocks {', '.join(blocks)} together (every {family} address), on {port}",
                required,
                fix,
            )


def check_services(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Services that select the stack's pods stay inside the cluster."""
    view = StackView(args.resources)
    workloads = view.workloads()
    for service in view.of_type(SERVICE):
        selector = get(service.props, "spec", "selector")
        selected = [
            w
            for w in workloads
            if namespace_of(w.props) == namespace_of(service.props)
            and selects(selector, pod_labels(w.resource_type, w.props))
        ]
        if not selected:
            continue
        subject = label(service.resource_type, service.props)
        pods = ", ".join(label(w.resource_type, w.props) for w in selected)
        fix = (
            f"keep the Service ClusterIP (or headless) without externalIPs: it selects the pods "
            f"of {pods}, which only the cluster's own workloads reach (Kafka clients connect to "
            "the brokers' pod DNS names); a node port, a load balancer or an external IP "
            "publishes them to every network that reaches the nodes, around the NetworkPolicies"
        )
        service_type = get(service.props, "spec", "type", default="ClusterIP")
        if service_type not in INTERNAL_SERVICE_TYPES:
            yield (
                violation(subject, "spec.type", service_type, "ClusterIP", fix),
                service.urn,
            )
        external = [str(ip) for ip in items(service.props, "spec", "externalIPs")]
        if external:
            yield (
                violation(subject, "spec.externalIPs", ", ".join(external), "absent", fix),
                service.urn,
            )


POLICIES = [
    stack_rule(
        name="network-policy-coverage",
        description=(
            "Every workload's pods are selected by an Ingress and an Egress NetworkPolicy: who "
            "may reach the brokers and the processor, and whom they may reach (the brokers, "
            "DNS), is declared, not everything."
        ),
        level=MANDATORY,
        check=check_coverage,
    ),
    resource_rule(
        name="network-policy-no-open-rules",
        description=(
            "No NetworkPolicy rule is open to every source or destination: no rule without "
            "from/to, no namespaceSelector that selects every namespace ({}, or only NotIn, "
            "DoesNotExist or Exists on kubernetes.io/metadata.name), with or without a "
            "podSelector (a pod anywhere may carry its labels), no podSelector {} on every "
            "port, no 0.0.0.0/0 ipBlock "
            "(DNS egress goes to kube-system on port 53)."
        ),
        level=MANDATORY,
        check=check_open_rules,
    ),
    stack_rule(
        name="services-cluster-internal",
        description=(
            "Services that select the stack's pods (the Kafka brokers above all) are ClusterIP "
            "or headless without externalIPs: never a NodePort or LoadBalancer that publishes "
            "them outside the cluster."
        ),
        level=MANDATORY,
        check=check_services,
    ),
]
