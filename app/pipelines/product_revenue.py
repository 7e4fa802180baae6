"""Revenue per product: a sum.

Input: key = the product id; value = a JSON order with an integer ``amount_cents`` (a refund is
negative). Output and changelog: the product's total in cents, a UTF-8 decimal.
"""

from __future__ import annotations

from typing import ClassVar

from app.pipelines.json_input import REASONS, json_object
from app.processor.aggregation import Total


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

    def example_record(self) -> tuple[bytes, bytes]:
        """An order of one product."""
        return b"p-1", b'{"amount_cents": 1299}'
