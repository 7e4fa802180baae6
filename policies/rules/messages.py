"""Violation messages: what, where, found, required, and how to fix it, in one sentence each."""

from __future__ import annotations


def show(value: object) -> str:
    """A value as the manifest spells it: `2` not `2.0` (the engine sends floats), `false`."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def violation(subject: str, field: str, found: object, required: str, fix: str) -> str:
    """`StatefulSet streaming/kafka: spec.replicas is 1; required: an odd number >= 3. Fix: ...`"""
    return f"{subject}: {field} is {show(found)}; required: {required}. Fix: {fix}"
