"""
A throwaway PKI for TLS under test: a CA, a server certificate for 127.0.0.1
and localhost, and client certificates, written as PEM files.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID


@dataclass
class Pki:
    directory: str
    caFile: str
    serverKeystore: str
    serverCert: str
    serverKey: str
    clientCert: str
    clientKey: str
    clientDn: str
    wrongHostKeystore: str
    #: a server certificate with an RSA key: static-RSA suites need one
    rsaServerKeystore: str


def _name(cn: str, org: str = "kafkatwist-tests") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def _cert(subject, issuer, publicKey, signingKey, *, ca=False, sans=None, client=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(publicKey)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if not ca:
        usage = [x509.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(signingKey, hashes.SHA256())


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _keyPem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def makePki(directory: str) -> Pki:
    os.makedirs(directory, exist_ok=True)
    caKey = ec.generate_private_key(ec.SECP256R1())
    caName = _name("kafkatwist test CA")
    ca = _cert(caName, caName, caKey.public_key(), caKey, ca=True)

    serverKey = ec.generate_private_key(ec.SECP256R1())
    server = _cert(
        _name("localhost"), caName, serverKey.public_key(), caKey,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    rsaKey = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsaServer = _cert(
        _name("localhost"), caName, rsaKey.public_key(), caKey,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    wrongKey = ec.generate_private_key(ec.SECP256R1())
    wrong = _cert(
        _name("elsewhere.example"), caName, wrongKey.public_key(), caKey,
        sans=[x509.DNSName("elsewhere.example")],
    )
    clientKey = ec.generate_private_key(ec.SECP256R1())
    clientName = _name("test-client", "kafkatwist-clients")
    client = _cert(clientName, caName, clientKey.public_key(), caKey, client=True)

    def write(name: str, data: bytes) -> str:
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    return Pki(
        directory=directory,
        caFile=write("ca.pem", _pem(ca)),
        serverKeystore=write("server-keystore.pem", _pem(server) + _pem(ca) + _keyPem(serverKey)),
        serverCert=write("server.pem", _pem(server)),
        serverKey=write("server.key", _keyPem(serverKey)),
        clientCert=write("client.pem", _pem(client)),
        clientKey=write("client.key", _keyPem(clientKey)),
        clientDn=clientName.rfc4514_string(),
        wrongHostKeystore=write("wrong-keystore.pem", _pem(wrong) + _keyPem(wrongKey)),
        rsaServerKeystore=write("rsa-server-keystore.pem", _pem(rsaServer) + _pem(ca) + _keyPem(rsaKey)),
    )
