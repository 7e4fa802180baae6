"""The interface between the processor's machinery and a pipeline's aggregation.

A fork writes one class (see `app/pipelines/page_view_count.py`, the first implementation) and
names it in the processor's `aggregation.class` setting. The machinery calls it and keeps what a
fork must not break: reading exactly the planned ranges, the dead-letter routing, restoring a
key's state from the changelog, ignoring state a restore made stale, and writing the output, the
changelog and the input offsets in one transaction.

Per key (the record key, as the input topic partitions by it):

- `fold` adds one input record to the partial of its key within one read range, or rejects it
  with a dead-letter reason (the input contract). It runs in the source's readers for every
  record, before anything crosses into the JVM, so it must be associative and cheap: the
  readers hand on one partial per key and range instead of every record.
- `update` adds a range's partial to the key's state (None: the key has no state yet).
- `changelog_value` is what the changelog keeps of a state and `restore` rebuilds the state from
  it: a state richer than what is published (a set of users) restores whole.
- `output_value` is what the output topic gets for the key's new state.

Its records live apart, in an `InputSample` beside it (`app.processor.input_sample`): the load
generator, the tests and the class archive's training run make them; the processor never loads
it. The local run's check and the benchmarks take their truth from the aggregation itself, by
folding every record the broker acknowledged (`devkit/truth.py`).

Re-keying is not part of the interface: a key's state lives in its input partition, so an
aggregation by another key than the input's needs a repartition step in front of the processor
(README, "Fork it").
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

P = TypeVar("P")  # a range's partial for one key (never a str: a str is a dead-letter reason)
S = TypeVar("S")  # a key's state


class Aggregation(ABC, Generic[P, S]):
    """One pipeline's aggregation (see the module docstring)."""

    #: Dead-letter reasons `fold` returns, with what each means (the README and the DLQ's
    #: consumers read them; the machinery adds none of its own).
    reasons: ClassVar[dict[str, str]] = {}

    @abstractmethod
    def fold(self, partial: P | None, key: bytes | None, value: bytes | None) -> P | str:
        """The key's partial with this record added, or why the record breaks the input contract
        (a dead-letter reason). `partial` is None for the key's first record in the range."""

    @abstractmethod
    def encode_partial(self, partial: P) -> bytes:
        """A partial as bytes, to cross from the reader into Spark."""

    @abstractmethod
    def decode_partial(self, data: bytes) -> P:
        """The partial `encode_partial` wrote."""

    @abstractmethod
    def update(self, state: S | None, partial: P) -> S:
        """The key's state with a range's partial added."""

    @abstractmethod
    def changelog_value(self, state: S) -> bytes:
        """What the changelog keeps of the state: enough for `restore` to rebuild it."""

    @abstractmethod
    def restore(self, value: bytes) -> S:
        """The state that `changelog_value` wrote."""

    @abstractmethod
    def output_value(self, state: S) -> bytes:
        """What the output topic gets for the key's new state."""


class Total(Aggregation[int, int]):
    """An integer total per key (a count, a sum): partials and states are ints, and the changelog
    and the output both get the total as a UTF-8 decimal. A subclass writes `fold`."""

    def encode_partial(self, partial: int) -> bytes:
        """A decimal."""
        return str(partial).encode("ascii")

    def decode_partial(self, data: bytes) -> int:
        """The decimal."""
        return int(data)

    def update(self, state: int | None, partial: int) -> int:
        """The total so far plus the range's."""
        return (state or 0) + partial

    def changelog_value(self, state: int) -> bytes:
        """The total as a decimal."""
        return str(state).encode("ascii")

    def restore(self, value: bytes) -> int:
        """The total the changelog kept."""
        return int(value)

    def output_value(self, state: int) -> bytes:
        """The total as a decimal."""
        return str(state).encode("ascii")


class AggregationClassError(ValueError):
    """`aggregation.class` names no usable class; `why` says what is wrong with it."""

    def __init__(self, class_name: str, why: str) -> None:
        self.why = why
        super().__init__(f"aggregation.class={class_name!r}: {why}")


def load_aggregation(class_name: str) -> Aggregation:
    """An instance of `module.Class` (the processor's `aggregation.class`)."""
    module_name, _, attribute = class_name.rpartition(".")
    wanted = "name a subclass of app.processor.aggregation.Aggregation as module.Class"
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as err:
        raise AggregationClassError(class_name, f"no such class ({err}); {wanted}") from err
    if not (isinstance(cls, type) and issubclass(cls, Aggregation)):
        raise AggregationClassError(class_name, f"not an Aggregation; {wanted}")
    return cls()
