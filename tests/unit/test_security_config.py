"""
The security settings: listener protocols, SASL mechanisms (global and per
listener), the authorizer's keys, and the refusals that stop start-up with
one line.
"""

import pytest

from kafkatwist.config import BrokerConfig, ConfigError


def test_defaults():
    c = BrokerConfig({})
    assert c["authorizer.class.name"] == ""
    assert c["super.users"] == []
    assert c["allow.everyone.if.no.acl.found"] is False
    assert c["connection.failed.authentication.delay.ms"] == 100
    assert c["connections.max.reauth.ms"] == 0
    assert c["sasl.enabled.mechanisms"] == ["GSSAPI"]
    assert c["listener.security.protocol.map"]["SASL_SSL"] == "SASL_SSL"


def test_sasl_listeners_and_mechanisms(tmp_path):
    pem = tmp_path / "k.pem"
    pem.write_text("x")
    c = BrokerConfig({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SECURE://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,SECURE:SASL_SSL,PLAINTEXT:PLAINTEXT",
        "ssl.keystore.location": str(pem),
        "sasl.enabled.mechanisms": "scram-sha-512,PLAIN",
        "listener.name.secure.sasl.enabled.mechanisms": "SCRAM-SHA-256",
    })
    byName = {l.name: l for l in c.listeners}
    assert byName["SECURE"].tls and byName["SECURE"].sasl
    assert byName["SASL_PLAINTEXT"].sasl and not byName["SASL_PLAINTEXT"].tls
    assert not byName["PLAINTEXT"].sasl
    assert c.saslMechanisms("SASL_PLAINTEXT") == ["SCRAM-SHA-512", "PLAIN"]
    assert c.saslMechanisms("SECURE") == ["SCRAM-SHA-256"]
    assert c.saslMechanisms("PLAINTEXT") == []


def test_super_users_are_semicolon_separated():
    assert BrokerConfig({"super.users": "User:admin; User:ops;"})["super.users"] == ["User:admin", "User:ops"]


@pytest.mark.parametrize(
    "values, key, why",
    [
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "sasl.enabled.mechanisms", "GSSAPI not supported"),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": ""},
         "sasl.enabled.mechanisms", "needs a SASL mechanism"),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"},
         "sasl.enabled.mechanisms", "OAUTHBEARER not supported"),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
          "listener.name.other.sasl.enabled.mechanisms": "PLAIN"},
         "listener.name.other.sasl.enabled.mechanisms", "there is no listener OTHER"),
        ({"listeners": "SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
         "ssl.keystore.location", "needs a PEM key"),
        ({"listener.security.protocol.map": "PLAINTEXT:KERBEROS"}, "listener.security.protocol.map",
         "must be one of"),
    ],
)
def test_refusals(values, key, why):
    with pytest.raises(ConfigError) as e:
        BrokerConfig(values, warn=lambda m: None)
    assert e.value.key == key
    assert why in e.value.why


def test_kafka_jaas_keys_are_tolerated_with_a_note():
    warnings = []
    BrokerConfig({
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": "x",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    }, warn=warnings.append)
    assert warnings == [
        "Configuration key 'listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config' is not used by kafkatwist"
    ]
