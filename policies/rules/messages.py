"""Violation messages: what, where, found, required, and how to fix it, in one sentence each."""

from __future__ import annotations


def violation(subject: str, field: str, found: object, required: str, fix: str) -> str:
    """`StatefulSet streaming/kafka: spec.replicas is 1; required: an odd number >= 3. Fix: ...`"""
    return f"{subject}: {field} is {found}; required: {required}. Fix: {fix}"
