"""The Kubernetes provider settings the program relies on, checked before it declares anything.

The provider replaces a ConfigMap or Secret whose data changes, unless told to update it in
place; and since the brokers' bootstrap ConfigMap and the SCRAM users' Secrets have fixed names,
it deletes each one first. A StatefulSet that depends on a deleted object is replaced too: every
broker pod is deleted at once. Pulumi.yaml turns in-place updates on for every stack; a stack
run without them (another project file, an Automation API program) is refused here, naming the
setting, rather than discovered on its first credentials rotation.
"""

from __future__ import annotations

import os

import pulumi

from infra.stack_settings import StackConfigError

# Provider setting -> the environment variable the provider reads when the setting is unset,
# and the kind of object it makes mutable.
MUTABLE_KINDS = {
    "enableConfigMapMutable": ("PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE", "ConfigMap"),
    "enableSecretMutable": ("PULUMI_K8S_ENABLE_SECRET_MUTABLE", "Secret"),
}


def check_provider_settings() -> None:
    """Refuse to run unless the provider updates ConfigMaps and Secrets in place."""
    config = pulumi.Config("kubernetes")
    for key, (variable, kind) in MUTABLE_KINDS.items():
        value = config.get(key)
        if value is None:
            value = os.environ.get(variable)
        if str(value).lower() != "true":
            raise StackConfigError(
                f"kubernetes:{key} = {value!r}: must be true (Pulumi.yaml sets it for every "
                f"stack; `pulumi config set kubernetes:{key} true`, or {variable}=true). "
                f"Without it the provider replaces a {kind} whose data changes, deleting it "
                "first when its name is fixed, and the StatefulSet that mounts it with it: a "
                "credentials rotation would restart every broker at once."
            )
