"""Distinct users per product: a set as the state, its size as the output.

Input: key = the product id; value = a JSON event with a non-empty string ``user``. The changelog
keeps the whole set (a sorted JSON array), so a restore rebuilds it; the output topic gets only
its size, a UTF-8 decimal.
"""

from __future__ import annotations

import random
from typing import ClassVar

import orjson

from app.pipelines.json_input import REASONS, json_object
from app.processor.aggregation import Aggregation
from app.processor.input_sample import InputSample

USERS = 1_000  # the load generator's distinct users


class DistinctUsers(Aggregation[set[str], set[str]]):
    """The set of users seen per product."""

    reasons: ClassVar[dict[str, str]] = {
        **REASONS,
        "invalid-user": "user is missing, empty or not a string",
    }

    def fold(
        self, partial: set[str] | None, key: bytes | None, value: bytes | None
    ) -> set[str] | str:
        """The range's users of the product with this event's user added."""
        event = json_object(key, value)
        if isinstance(event, str):
            return event
        user = event.get("user")
        if type(user) is not str or not user:
            return "invalid-user"
        if partial is None:
            return {user}
        partial.add(user)
        return partial

    def encode_partial(self, partial: set[str]) -> bytes:
        """A sorted JSON array."""
        return orjson.dumps(sorted(partial))

    def decode_partial(self, data: bytes) -> set[str]:
        """The array's users."""
        return set(orjson.loads(data))

    def update(self, state: set[str] | None, partial: set[str]) -> set[str]:
        """The union."""
        return partial if state is None else state | partial

    def changelog_value(self, state: set[str]) -> bytes:
        """The whole set, a sorted JSON array."""
        return orjson.dumps(sorted(state))

    def restore(self, value: bytes) -> set[str]:
        """The set the changelog kept."""
        return set(orjson.loads(value))

    def output_value(self, state: set[str]) -> bytes:
        """How many users, a decimal."""
        return str(len(state)).encode("ascii")


class ProductVisits(InputSample):
    """Product events by `USERS` users, and the contract broken three ways."""

    aggregation = DistinctUsers

    def key_name(self, index: int) -> str:
        """A product id."""
        return f"p-{index}"

    def generate_value(self, key: str, rng: random.Random, ts_ms: int) -> bytes:
        """An event of one of `USERS` users."""
        return orjson.dumps({"user": f"u{rng.randrange(USERS)}", "ts": ts_ms})

    def malformed_values(self, key: str) -> dict[str, bytes | None]:
        """An empty user, a JSON array, no value."""
        return {"invalid-user": b'{"user": ""}', "invalid-value": b"[]", "null-value": None}
