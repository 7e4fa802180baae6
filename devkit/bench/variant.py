"""A benchmark variant: contract keys every instance of a row gets beside the defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    """Contract keys an instance gets beside the defaults (none: the defaults themselves)."""

    settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The row's `settings` cell."""
        return ", ".join(f"{k}={v}" for k, v in self.settings.items()) or "defaults"
