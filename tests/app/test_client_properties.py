"""Client properties files (`--command-config`): one loader for every tool, secrets by reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.client_properties import ClientPropertiesError, load_client_config


def test_settings_are_read_and_env_references_resolved(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.username=loadgen\nsasl.password=${env:SASL_PASSWORD}\n"
    )
    config = load_client_config(path, {"SASL_PASSWORD": "s3cret"})
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "loadgen",
        "sasl.password": "s3cret",
    }


def test_no_file_means_no_settings() -> None:
    assert load_client_config(None, {}) == {}


def test_an_unset_variable_names_the_file_line_key_and_variable(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.password=${env:UNSET_PASSWORD}\n")
    with pytest.raises(ClientPropertiesError) as raised:
        load_client_config(path, {})
    message = str(raised.value)
    assert f"--command-config {path}:2 sasl.password" in message
    assert "UNSET_PASSWORD" in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(ClientPropertiesError, match=f"cannot read --command-config {missing}"):
        load_client_config(missing, {})
