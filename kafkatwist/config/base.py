"""
The leaf definitions the configuration modules share: L{ConfigError}, the
DescribeConfigs enums (L{ConfigSource}, L{ConfigType}), a L{Listener} and
the security protocol names, and Kafka's update modes of a key.

Re-exported by L{kafkatwist.config}; import them from there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """
    A setting that cannot be used; the message names the key.
    """

    def __init__(self, key: str, why: str) -> None:
        self.key = key
        self.why = why
        super().__init__(f"Invalid value for {key}: {why}")


#: listener security protocols (Kafka's SecurityProtocol names)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
#: SASL mechanisms kafkatwist implements (kafkatwist.security.session)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class Listener:
    """
    One listener: C{NAME://host:port}.
    """

    name: str
    host: str
    port: int
    securityProtocol: str

    @property
    def tls(self) -> bool:
        """
        Whether connections are TLS (SSL and SASL_SSL).
        """
        return self.securityProtocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        """
        Whether clients authenticate with SASL (SASL_PLAINTEXT and SASL_SSL).
        """
        return self.securityProtocol in SASL_PROTOCOLS

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


class ConfigSource(enum.IntEnum):
    """
    DescribeConfigs' C{config_source} values.
    """

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """
    DescribeConfigs' C{config_type} values (v3+).
    """

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


#: Kafka's update modes of a broker key (its documentation's "Update Mode")
READ_ONLY = "read-only"
PER_BROKER = "per-broker"
CLUSTER_WIDE = "cluster-wide"
