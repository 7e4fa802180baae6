"""Kubernetes resource quantities (`500m`, `2`, `512Mi`, `4Gi`) as numbers."""

from __future__ import annotations

import re
from numbers import Real

_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SCALE = {
    None: 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": float(2**10),
    "Mi": float(2**20),
    "Gi": float(2**30),
    "Ti": float(2**40),
}


def parse_quantity(value: object) -> float:
    """The quantity as a plain number (cores, bytes); ValueError names the accepted forms."""
    if isinstance(value, Real) and not isinstance(value, bool):
        return float(value)
    match = _QUANTITY.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity such as 500m, 2, 512Mi or 4Gi")
    return float(match.group(1)) * _SCALE[match.group(2)]


def quantity_or_none(value: object) -> float | None:
    """The quantity as a plain number, None if it is not one (for rules that report it)."""
    try:
        return parse_quantity(value)
    except ValueError:
        return None
