"""No RBAC for the stack's workloads: nothing the program deploys calls the Kubernetes API.

The brokers, the processors and the Jobs talk to Kafka only, and their pods and service
accounts mount no token (`pod-security`). A binding that names one of their service accounts,
or a group every service account of the namespace (or of the cluster) is in, gives whoever runs
in those pods whatever the role holds, once anything mounts a token: a fork that needs the API
declares the role with its reason, in review.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import StackValidationArgs

from .config import MANDATORY, stack_rule
from .manifests import get, items, label, namespace_of, pod_spec
from .stack_view import StackView

BINDINGS = (
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
)
# Groups that hold every service account of a namespace (the suffix), of the cluster, or
# everyone who authenticates.
_EVERY_ACCOUNT = "system:serviceaccounts"
_EVERYONE = ("system:authenticated", "system:unauthenticated")

Finding = tuple[str, str | None]


def _accounts(view: StackView) -> set[tuple[str, str]]:
    """(namespace, service account) of every workload's pods (`default` when none is named)."""
    return {
        (
            namespace_of(w.props),
            str(get(pod_spec(w.resource_type, w.props), "serviceAccountName", default="default")),
        )
        for w in view.workloads()
    }


def _bound(subject: Mapping[str, Any], binding_ns: str, accounts: set[tuple[str, str]]) -> str:
    """What of the stack's workloads a binding's subject reaches ("" for none of them)."""
    kind, name = get(subject, "kind"), str(get(subject, "name", default=""))
    namespaces = {ns for ns, _ in accounts}
    if kind == "ServiceAccount":
        namespace = str(get(subject, "namespace", default=binding_ns))
        return f"service account {namespace}/{name}" if (namespace, name) in accounts else ""
    if kind == "Group":
        if name == _EVERY_ACCOUNT or name in _EVERYONE:
            return f"group {name} (every workload's service account)"
        namespace = name.removeprefix(f"{_EVERY_ACCOUNT}:")
        if name.startswith(f"{_EVERY_ACCOUNT}:") and namespace in namespaces:
            return f"group {name} (every service account of {namespace})"
    return ""


def check_rbac(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """No Role or ClusterRole bound to a service account the stack's workloads run as."""
    view = StackView(args.resources)
    accounts = _accounts(view)
    for binding in (r for r in args.resources if r.resource_type in BINDINGS):
        role = get(binding.props, "roleRef", default={})
        shown_role = f"{get(role, 'kind', default='?')} {get(role, 'name', default='?')}"
        for index, subject in enumerate(items(binding.props, "subjects")):
            reached = _bound(subject, namespace_of(binding.props), accounts)
            if reached:
                yield (
                    f"{label(binding.resource_type, binding.props)}: subjects[{index}] is "
                    f"{reached}, bound to {shown_role}; required: no RBAC for the stack's "
                    "workloads (the contract declares none: nothing here calls the Kubernetes "
                    "API). Fix: remove the binding, or run what needs the API under a service "
                    "account of its own, outside the stack's workloads",
                    binding.urn,
                )


POLICIES = [
    stack_rule(
        name="workload-rbac",
        description=(
            "No RoleBinding or ClusterRoleBinding names a service account the stack's "
            "workloads run as, or a group that holds it (system:serviceaccounts[:<namespace>], "
            "system:authenticated): nothing the program deploys calls the Kubernetes API."
        ),
        level=MANDATORY,
        check=check_rbac,
    ),
]
