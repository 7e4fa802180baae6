"""Client properties files (`--command-config`): one loader for every tool, secrets by reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.clients.client_properties import ClientConfig, ClientPropertiesError
from devkit.local.__main__ import parse_args


def test_settings_are_read_and_env_references_resolved(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.username=loadgen\nsasl.password=${env:SASL_PASSWORD}\n"
    )
    config = ClientConfig.load(path, {"SASL_PASSWORD": "s3cret"}).resolved
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "loadgen",
        "sasl.password": "s3cret",
    }


def test_no_file_means_no_settings() -> None:
    assert ClientConfig.load(None, {}).resolved == {}


def test_an_unset_variable_names_the_file_line_key_and_variable(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.password=${env:UNSET_PASSWORD}\n")
    with pytest.raises(ClientPropertiesError) as raised:
        ClientConfig.load(path, {})
    message = str(raised.value)
    assert f"--command-config {path}:2 sasl.password" in message
    assert "UNSET_PASSWORD" in message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ssl.endpoint.identification.algorithm=none", "must be https"),
        ("enable.ssl.certificate.verification=false", "must be true"),
        ("ssl.enabled.protocols=TLSv1.1,TLSv1.2", "it enables TLSv1.1"),
    ],
)
def test_a_setting_that_weakens_tls_is_refused_with_its_line(
    tmp_path: Path, line: str, expected: str
) -> None:
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SASL_SSL\n{line}\n")
    with pytest.raises(ClientPropertiesError) as raised:
        ClientConfig.load(path, {})
    assert f"--command-config {path}:2 {line.split('=')[0]}" in str(raised.value)
    assert expected in str(raised.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(ClientPropertiesError, match=f"cannot read --command-config {missing}"):
        ClientConfig.load(missing, {})


def test_a_child_process_gets_the_security_settings_as_written(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "password").write_text("s3cret")
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.password=${{dir:{secret}:password}}\n"
        "ssl.ca.location=/etc/kafka-ca/ca.crt\n"
        "client.id=operator\n"
    )
    config = ClientConfig.load(path, {})
    assert config.resolved["sasl.password"] == "s3cret"
    # A processor instance's properties: security keys only, the reference kept.
    assert config.security() == {
        "security.protocol": "SASL_SSL",
        "sasl.password": f"${{dir:{secret}:password}}",
        "ssl.ca.location": "/etc/kafka-ca/ca.crt",
    }
    assert config.arguments() == ["--command-config", str(path)]
    assert ClientConfig().arguments() == [] and ClientConfig().security() == {}


def test_the_local_run_refuses_command_config_on_its_own_plaintext_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(SystemExit):
        parse_args(["--command-config", str(tmp_path / "client.properties")])
    assert "the local cluster runs PLAINTEXT; give --bootstrap-servers" in capsys.readouterr().err
