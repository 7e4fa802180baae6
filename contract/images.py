"""Image references, read with the standard library only: the Pulumi program imports this too."""

from __future__ import annotations

import re

# An OCI content digest as registries give it: the only pin a registry cannot move.
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def is_digest_pinned(image: str) -> bool:
    """`repo[:tag]@sha256:<64 hex>`: the image is the one its digest names, whatever a tag says."""
    return _DIGEST.search(image) is not None
