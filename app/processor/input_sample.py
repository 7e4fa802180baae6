"""A pipeline's sample input: the records made for an aggregation, apart from the aggregation.

The processor runs an `Aggregation` and never loads its sample. The load generator, the local
run's check, the benchmarks, the tests and the class archive's training run (at image build)
make their records from the `InputSample` written beside it, in the same module, that names it
in `aggregation` (see `app/pipelines/page_view_count.py`): `input_sample_for` finds it from the
aggregation alone, so a fork names only its `aggregation.class`.
"""

from __future__ import annotations

import random
import sys
from abc import ABC, abstractmethod
from typing import ClassVar

from app.processor.aggregation import Aggregation


class InputSample(ABC):
    """Records for one aggregation's input contract, valid and broken on purpose."""

    #: The aggregation whose input this is.
    aggregation: ClassVar[type[Aggregation]]

    def key_name(self, index: int) -> str:
        """The key of the load generator's key number `index` (0: the most frequent)."""
        return f"key-{index:04d}"

    @abstractmethod
    def generate_value(self, key: str, rng: random.Random, ts_ms: int) -> bytes:
        """A valid input value for `key`, created at `ts_ms` (epoch ms): the load generator's
        records and the class archive's training row. Draw every random choice from `rng`."""

    def malformed_values(self, key: str) -> dict[str, bytes | None]:
        """Values for `key` that break the input contract, by the dead-letter reason the
        aggregation's `fold` gives each: the load generator's `--malformed-ratio` rotates
        through them."""
        return {}


def input_sample_for(aggregation: Aggregation) -> InputSample:
    """The sample written for `aggregation`'s class (or the nearest class it extends), beside it."""
    for cls in type(aggregation).__mro__:
        module = sys.modules.get(cls.__module__)
        for candidate in vars(module).values() if module else ():
            if (
                isinstance(candidate, type)
                and issubclass(candidate, InputSample)
                and getattr(candidate, "aggregation", None) is cls
            ):
                return candidate()
    name = type(aggregation).__name__
    raise LookupError(
        f"{type(aggregation).__module__} has no InputSample for {name}: write one beside it "
        f"with `aggregation = {name}` (app/pipelines/page_view_count.py shows how)"
    )
