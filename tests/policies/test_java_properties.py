"""The one properties codec (`contract/java_properties.py`): java.util.Properties' escapes
and continuation lines, a writer that round-trips, and the policy pack reading a ConfigMap the
way the processor reads its file. (tests/app/test_settings.py also compares it with a JVM.)"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from contract.java_properties import (
    env_reference,
    format_properties,
    is_credential_key,
    is_reference,
    load_properties,
    parse_properties,
)
from tests.policies.handmade_stack import Resource, changed

REPO = Path(__file__).resolve().parents[2]


def test_continuation_lines_join_without_the_next_lines_leading_blanks() -> None:
    text = "a=one \\\n    two \\\n\tthree\nb=x\n"
    assert load_properties(text) == {"a": "one two three", "b": "x"}


def test_an_even_number_of_trailing_backslashes_is_an_escaped_backslash_not_a_continuation() -> (
    None
):
    assert load_properties("a=x\\\\\nb=y\\\\\\\n  z\n") == {"a": "x\\", "b": "y\\z"}


def test_a_comment_ending_in_a_backslash_does_not_continue() -> None:
    assert load_properties("# comment \\\na=1\n! other \\\nb=2\n") == {"a": "1", "b": "2"}


def test_a_backslash_at_the_end_of_the_file_is_dropped() -> None:
    assert load_properties("a=1\\") == {"a": "1"}


def test_line_numbers_are_where_the_logical_line_starts() -> None:
    lines = {e.key: e.line for e in parse_properties("# c\na=1\nb=x\\\n  y\nc=2\n")}
    assert lines == {"a": 2, "b": 3, "c": 5}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=tab\\there", {"a": "tab\there"}),
        ("a=new\\nline", {"a": "new\nline"}),
        ("a=\\u00e9t\\u00E9", {"a": "été"}),
        ("a=\\uD83D\\uDE00", {"a": "\N{GRINNING FACE}"}),
        ("key\\ with\\ blanks=v", {"key with blanks": "v"}),
        ("k\\:colon\\=equals=v", {"k:colon=equals": "v"}),
        ("a=read\\_committed", {"a": "read_committed"}),
        ("a=\\  leading blank kept", {"a": "  leading blank kept"}),
    ],
)
def test_escapes_are_read_as_java_reads_them(text: str, expected: dict[str, str]) -> None:
    assert load_properties(text) == expected


@pytest.mark.parametrize("text", ["a:1", "a 1", "a = 1", "a\t:\t1", "  a=1"])
def test_every_separator_form_gives_the_same_pair(text: str) -> None:
    assert load_properties(text) == {"a": "1"}


def test_trailing_blanks_of_a_value_are_kept_and_a_later_duplicate_wins() -> None:
    assert load_properties("a=1  \na=2 \n") == {"a": "2 "}


def test_a_malformed_unicode_escape_names_its_line() -> None:
    with pytest.raises(ValueError, match=r"line 2: malformed \\uxxxx escape"):
        parse_properties("a=1\nb=\\u12x4\n")


def test_format_round_trips_every_character_that_needs_an_escape() -> None:
    tricky = {
        "plain.key": "${env:POD_NAME}",
        "key with blanks": "v",
        "k:colon=equals": "x",
        "#not-a-comment": "!not-a-comment",
        "backslash": "C:\\dir\\",
        "multi": "line one\nline two\r\n\ttabbed\f",
        "leading": "   three blanks",
        "unicode": "été \N{GRINNING FACE}",
        "control": "\x01\x7f",
        "empty": "",
    }
    text = format_properties(tricky, comment="first\nsecond")
    assert text.startswith("# first\n# second\n")
    assert text.isascii()
    assert load_properties(text) == tricky


def test_format_writes_plain_values_as_they_are() -> None:
    """Plain settings stay readable in the ConfigMap (and keep its content hash)."""
    text = format_properties({"a.b": "1", "c": "${env:POD_NAME}", "d": "x y"})
    assert text == "a.b=1\nc=${env:POD_NAME}\nd=x y\n"


def test_env_reference_is_the_whole_value_only() -> None:
    assert env_reference("${env:POD_NAME}") == "POD_NAME"
    assert env_reference("prefix-${env:POD_NAME}") is None
    assert env_reference("${env:POD_NAME} ") is None  # the processor would keep the blank
    assert env_reference(None) is None


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("sasl.password", True),
        ("consumer.sasl.password", True),
        ("ssl.keystore.key", True),
        ("sasl.jaas.config", True),
        ("KAFKA_SSL_KEY_PASSWORD", True),
        ("KAFKA_SSL_KEYSTORE_KEY", True),
        ("KAFKA_LISTENER_NAME_CLIENT_SCRAM___SHA___512_SASL_JAAS_CONFIG", True),
        ("TLS_PRIVATE_KEY", True),
        ("sasl.username", False),
        ("ssl.key.location", False),
        ("KAFKA_SSL_KEYSTORE_LOCATION", False),
        ("POD_NAME", False),
    ],
)
def test_credential_keys_are_recognised_as_settings_and_as_env_var_names(
    name: str, credential: bool
) -> None:
    assert is_credential_key(name) is credential


@pytest.mark.parametrize(
    ("value", "reference"),
    [
        ("${env:SASL_PASSWORD}", True),
        (" ${dir:/etc/kafka-user:password} ", True),
        ("${file:/etc/kafka/client.properties:sasl.password}", False),
        ("hunter2", False),
        ("pw-${env:SUFFIX}", False),
        ("${env:A}${env:B}", False),
        ("${vault:kafka/password}", False),
    ],
)
def test_a_reference_is_one_whole_env_or_dir_reference(value: str, reference: bool) -> None:
    assert is_reference(value) is reference


def test_the_codec_imports_without_pulumi_policy() -> None:
    """The processor image has no pulumi-policy: importing the codec must not need it."""
    code = "import sys; sys.modules['pulumi_policy'] = None; import contract.java_properties"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def _with_properties_text(edit_text: Callable[[str], str]) -> Callable[[Resource], None]:
    def edit(r: Resource) -> None:
        r.props["data"]["processor.properties"] = edit_text(r.props["data"]["processor.properties"])

    return edit


def test_the_pack_reads_escapes_and_continuation_lines_as_the_processor_does(run) -> None:
    from tests.policies.handmade_stack import handmade_stack

    def escaped(text: str) -> str:
        return text.replace(
            "consumer.isolation.level=read_committed",
            "consumer.isolation.level : read\\_committed",
        ).replace(
            "consumer.partition.assignment.strategy=cooperative-sticky",
            "consumer.partition.assignment.strategy=cooperative-\\\n        sticky",
        )

    stack = changed(handmade_stack(), "processor-config", _with_properties_text(escaped))
    assert run(stack) == []

    def uncommitted(text: str) -> str:
        return text.replace(
            "consumer.isolation.level=read_committed",
            "consumer.isolation.level=read_un\\\n    committed",
        )

    stack = changed(handmade_stack(), "processor-config", _with_properties_text(uncommitted))
    violations = run(stack)
    assert {v.policy for v in violations} == {"group-read-committed"}
    assert "consumer.isolation.level is read_uncommitted" in violations[0].message
