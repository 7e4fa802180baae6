"""Revenue per product: a sum.

Input: key = the product id; value = a JSON order with an integer ``amount_cents`` (a refund is
negative). Output and changelog: the product's total in cents, a UTF-8 decimal.
"""

from __future__ import annotations

import random
from typing import ClassVar

import orjson

from app.pipelines.json_input import REASONS, json_object
from app.processor.aggregation import Total
from app.processor.input_sample import InputSample


class ProductRevenue(Total):
    """The running total of `amount_cents` per product."""

    reasons: ClassVar[dict[str, str]] = {
        **REASONS,
        "invalid-amount": "amount_cents is missing or not an integer",
    }

    def fold(self, partial: int | None, key: bytes | None, value: bytes | None) -> int | str:
        """The range's total for the product with this order's amount added."""
        order = json_object(key, value)
        if isinstance(order, str):
            return order
        amount = order.get("amount_cents")
        if type(amount) is not int:  # bool is an int subclass; a float is no cent count
            return "invalid-amount"
        return amount if partial is None else partial + amount


class Orders(InputSample):
    """Orders and refunds, and the contract broken three ways."""

    aggregation = ProductRevenue

    def key_name(self, index: int) -> str:
        """A product id."""
        return f"p-{index}"

    def generate_value(self, key: str, rng: random.Random, ts_ms: int) -> bytes:
        """An order of 1.00 to 99.99, one in twenty a refund (negative)."""
        amount = rng.randrange(100, 10_000)
        return orjson.dumps(
            {"amount_cents": -amount if rng.random() < 0.05 else amount, "ts": ts_ms}
        )

    def malformed_values(self, key: str) -> dict[str, bytes | None]:
        """A fractional amount, not JSON, no value."""
        return {
            "invalid-amount": b'{"amount_cents": 12.5}',
            "invalid-value": f"not json: {key}".encode(),
            "null-value": None,
        }
