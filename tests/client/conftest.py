"""
Fixtures for the client tests: fake clusters and a throwaway PKI.
"""

import datetime
import ipaddress
import ssl

import pytest

from .fakebroker import FakeCluster


@pytest.fixture
def cluster():
    """
    A fake cluster; add brokers with C{cluster.addBroker()}.  Closed after
    the test.
    """
    c = FakeCluster()
    yield c
    c.close()


@pytest.fixture
def broker(cluster):
    """
    A one-broker fake cluster's broker, with topic C{"t"} (2 partitions).
    """
    b = cluster.addBroker()
    cluster.createTopic("t", 2)
    return b


# -- PKI -----------------------------------------------------------------


class PKI:
    """
    PEM files in a temporary directory: a CA, server certificates signed by
    it, and a client certificate whose key is password-protected.
    """

    def __init__(self, directory):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509 = x509
        self._hashes = hashes
        self._serialization = serialization
        self._ec = ec
        self._NameOID = NameOID
        self.directory = directory
        self.caKey, self.caCert = self._ca("kafkatwist test CA")
        self.cafile = self._write("ca.pem", self._certPEM(self.caCert))
        otherKey, otherCert = self._ca("some other CA")
        self.otherCafile = self._write("other-ca.pem", self._certPEM(otherCert))
        self.server = self.issue("server", dns=["localhost"], ips=["127.0.0.1"])
        self.wrongServer = self.issue("wrong", dns=["wrong.example"], ips=[])
        self.clientPassword = "s3cret"
        self.client = self.issue("client", dns=[], ips=[], password=self.clientPassword)

    def _name(self, cn):
        return self._x509.Name([self._x509.NameAttribute(self._NameOID.COMMON_NAME, cn)])

    def _ca(self, cn):
        x509 = self._x509
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(self._name(cn))
            .issuer_name(self._name(cn))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, self._hashes.SHA256())
        )
        return key, cert

    def issue(self, name, dns, ips, password=None):
        """
        @return: (certfile, keyfile) paths.
        """
        x509 = self._x509
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(self._name(name))
            .issuer_name(self.caCert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.caKey.public_key()),
                critical=False,
            )
        )
        names = [x509.DNSName(d) for d in dns] + [
            x509.IPAddress(ipaddress.ip_address(i)) for i in ips
        ]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.caKey, self._hashes.SHA256())
        encryption = (
            self._serialization.BestAvailableEncryption(password.encode())
            if password
            else self._serialization.NoEncryption()
        )
        keyPEM = key.private_bytes(
            self._serialization.Encoding.PEM,
            self._serialization.PrivateFormat.PKCS8,
            encryption,
        )
        certfile = self._write(f"{name}.pem", self._certPEM(cert))
        keyfile = self._write(f"{name}-key.pem", keyPEM)
        return certfile, keyfile

    def _certPEM(self, cert):
        return cert.public_bytes(self._serialization.Encoding.PEM)

    def _write(self, name, data):
        path = self.directory / name
        path.write_bytes(data)
        return str(path)

    def serverContext(self, which="server", requireClientCert=False):
        """
        @return: a stdlib server-side C{ssl.SSLContext} for the fake broker.
        """
        certfile, keyfile = getattr(self, which)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
        if requireClientCert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.cafile)
        return ctx


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return PKI(tmp_path_factory.mktemp("pki"))
