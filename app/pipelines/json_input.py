"""The input contract the repository's pipelines share: a UTF-8, non-empty key (the thing
aggregated per key: a page, a product) and a UTF-8 JSON object as the value."""

from __future__ import annotations

from typing import Any

import orjson

# The reasons `json_object` returns, as each pipeline's `reasons` documents them.
REASONS = {
    "null-key": "the record has no key",
    "invalid-key": "the key is not UTF-8, or empty",
    "null-value": "the record has no value",
    "invalid-value": "the value is not UTF-8 JSON, or not a JSON object",
}


def json_object(key: bytes | None, value: bytes | None) -> dict[str, Any] | str:
    """The value as a JSON object, or why the record breaks the shared contract."""
    if key is None:
        return "null-key"
    try:
        if not key.decode("utf-8"):
            return "invalid-key"
    except UnicodeDecodeError:
        return "invalid-key"
    if value is None:
        return "null-value"
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return "invalid-value"
    return parsed if type(parsed) is dict else "invalid-value"
