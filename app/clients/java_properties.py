"""The java.util.Properties format, under the name the application has always imported it by.

The codec itself is `policies/contract/java_properties.py`: one reader and writer shared by the
processor, the topic reconciler, the Pulumi program, the local run and the policy pack (which
the Pulumi CLI installs from `policies/` alone, so the codec has to live there).
"""

from policies.contract.java_properties import (
    PropertyLine,
    format_properties,
    is_credential_key,
    load_properties,
    parse_properties,
    resolve_env,
)

__all__ = [
    "PropertyLine",
    "format_properties",
    "is_credential_key",
    "load_properties",
    "parse_properties",
    "resolve_env",
]
