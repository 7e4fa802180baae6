"""Page views counted per page: the first implementation of `Aggregation`.

Input contract (shared with the load generator):

- key: the page, UTF-8, not empty. Records are partitioned by key (Kafka's default partitioner),
  so one page's count lives in one partition.
- value: a UTF-8 JSON object, one page view, e.g. ``{"page": "/home", "user": "u1", "ts": ...}``.
  If it has a ``page`` field, that field must equal the key. Other fields are not read.

Output and changelog: the page's count as a UTF-8 decimal (``b"42"``).
"""

from __future__ import annotations

import random
from typing import ClassVar

import orjson

from app.pipelines.json_input import REASONS
from app.processor.aggregation import Total
from app.processor.input_sample import InputSample

USERS = 10_000  # the load generator's distinct users

# An object or array in the `page` field is not a page name to compare with the key.
_CONTAINERS = (dict, list)


class PageViewCount(Total):
    """How many views each page had."""

    reasons: ClassVar[dict[str, str]] = {
        **REASONS,
        "page-mismatch": "the value's page field differs from the key",
    }

    def fold(self, partial: int | None, key: bytes | None, value: bytes | None) -> int | str:
        """One view more, unless the record breaks the contract.

        Per record, this is the hot loop of the whole processor: the contract is checked inline
        (no further call) with orjson, which parses strictly (UTF-8, no NaN), as Spark's
        parse_json does.
        """
        if key is None:
            return "null-key"
        try:
            page = key.decode("utf-8")
        except UnicodeDecodeError:
            return "invalid-key"
        if not page:
            return "invalid-key"
        if value is None:
            return "null-value"
        try:
            view = orjson.loads(value)
        except orjson.JSONDecodeError:
            return "invalid-value"
        if type(view) is not dict:
            return "invalid-value"
        named = view.get("page")
        if (
            named is not None
            and not isinstance(named, _CONTAINERS)
            and (named if isinstance(named, str) else orjson.dumps(named).decode()) != page
        ):
            return "page-mismatch"
        return 1 if partial is None else partial + 1


class PageViews(InputSample):
    """Page views by `USERS` users, and the contract broken three ways."""

    aggregation = PageViewCount

    def key_name(self, index: int) -> str:
        """A page path."""
        return f"/page/{index:04d}"

    def generate_value(self, key: str, rng: random.Random, ts_ms: int) -> bytes:
        """A view of the page by one of `USERS` users."""
        return orjson.dumps({"page": key, "user": f"u{rng.randrange(USERS)}", "ts": ts_ms})

    def malformed_values(self, key: str) -> dict[str, bytes | None]:
        """Not JSON, another page in the value, no value."""
        return {
            "invalid-value": f"not json: {key}".encode(),
            "page-mismatch": orjson.dumps({"page": f"{key}/other"}),
            "null-value": None,
        }


def contract_violation(key: bytes | None, value: bytes | None) -> str | None:
    """Why a page view breaks the input contract, or None when it is fine."""
    folded = _COUNT.fold(None, key, value)
    return folded if isinstance(folded, str) else None


_COUNT = PageViewCount()
