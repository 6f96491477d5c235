"""
Client certificate principals as Kafka names them: the JVM's RFC 2253
rendering of the subject, then ssl.principal.mapping.rules.

The expected names were printed by Java 17's X500Principal.getName() for the
same certificates; with java on PATH the test asks the JVM again.
"""

import datetime
import os
import shutil
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kafkatwist.config import BrokerConfig, ConfigError
from kafkatwist.security.sslprincipal import (
    InvalidRules,
    NoMatchingRule,
    SslPrincipalBuilder,
    parseRules,
    rfc2253,
)

A = x509.NameAttribute
_ASN1 = x509.name._ASN1Type

SUBJECTS = [
    # openssl -subj "/CN=app/O=acme": RFC 2253 writes the last RDN first
    ([[A(NameOID.COMMON_NAME, "app")], [A(NameOID.ORGANIZATION_NAME, "acme")]], "O=acme,CN=app"),
    (
        [
            [A(NameOID.COUNTRY_NAME, "DE")],
            [A(NameOID.STATE_OR_PROVINCE_NAME, "Be rlin")],
            [A(NameOID.ORGANIZATION_NAME, "Acme, Inc.")],
            [A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops")],
            [A(NameOID.COMMON_NAME, "app"), A(NameOID.USER_ID, "42")],
            [A(NameOID.EMAIL_ADDRESS, "a@b.c")],
        ],
        "1.2.840.113549.1.9.1=#16056140622e63,CN=app+UID=42,OU=ops,O=Acme\\, Inc.,ST=Be rlin,C=DE",
    ),
    (
        [
            [A(NameOID.DOMAIN_COMPONENT, "com")],
            [A(NameOID.COMMON_NAME, '  lead#x"q<>;=+\\ ')],
            [A(NameOID.SERIAL_NUMBER, "7")],
            [A(NameOID.TITLE, "Dr")],
        ],
        '2.5.4.12=#0c024472,2.5.4.5=#130137,CN=\\ \\ lead\\#x\\"q\\<\\>\\;\\=\\+\\\\\\ ,DC=com',
    ),
    ([[A(NameOID.COMMON_NAME, "Jürgen")], [A(NameOID.ORGANIZATION_NAME, "Ü")]], "O=Ü,CN=Jürgen"),
    # The JVM reads a BMPString's bytes (00 DC) as UTF-8 too.
    ([[A(NameOID.COMMON_NAME, "x")], [A(NameOID.ORGANIZATION_NAME, "Ü", _ASN1.BMPString)]],
     "O=\\00\ufffd,CN=x"),
    ([[A(NameOID.COMMON_NAME, "x", _ASN1.UniversalString)]], "CN=#1c0400000078"),
]


def certificate(rdns):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.RelativeDistinguishedName(rdn) for rdn in rdns])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )


@pytest.mark.parametrize("rdns, expected", SUBJECTS)
def test_subject_in_the_jvm_rfc2253_form(rdns, expected):
    cert = certificate(rdns)
    assert rfc2253(cert.subject.public_bytes()) == expected
    assert SslPrincipalBuilder()(cert) == "User:" + expected


@pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH to compare with")
def test_same_names_as_the_jvm(tmp_path):
    source = tmp_path / "Dn.java"
    source.write_text(
        "import java.io.*; import java.security.cert.*;\n"
        "public class Dn { public static void main(String[] a) throws Exception {\n"
        "  CertificateFactory f = CertificateFactory.getInstance(\"X.509\");\n"
        "  for (String p : a) { X509Certificate c = (X509Certificate) f.generateCertificate(new FileInputStream(p));\n"
        "    System.out.println(c.getSubjectX500Principal().getName()); } } }\n"
    )
    paths = []
    for i, (rdns, _) in enumerate(SUBJECTS):
        path = tmp_path / f"c{i}.pem"
        path.write_bytes(certificate(rdns).public_bytes(serialization.Encoding.PEM))
        paths.append(str(path))
    out = subprocess.run(["java", str(source), *paths], capture_output=True, timeout=120,
                         env=dict(os.environ, JAVA_TOOL_OPTIONS="-Dfile.encoding=UTF-8"))
    lines = [l for l in out.stdout.decode("utf-8").splitlines() if not l.startswith("Picked up")]
    assert lines == [expected for _, expected in SUBJECTS], out.stderr.decode()


DN = "CN=kafka1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"


@pytest.mark.parametrize(
    "rules, dn, name",
    [
        ("DEFAULT", DN, DN),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", DN, "kafka1"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", DN, "kafka1"),
        ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U", DN, "KAFKA1@SERVICEUSERS"),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L", DN, "kafka1@serviceusers,o=unknown,l=unknown,st=unknown,c=unknown"),
        ("RULE:^CN=(.*?),OU=Admins.*$/$1/L, DEFAULT", DN, DN),
        ("RULE:^O=(.*?),CN=(.*?)$/$2\\/$1/, RULE:^.*$/other/", "O=acme,CN=app", "app/acme"),
        # $3 with two groups is literal text, as Kafka makes it
        ("RULE:^CN=(.*?),(.*)$/$1$3/", DN, "kafka1$3"),
        # a backslash-escaped slash belongs to the pattern
        ("RULE:^CN=([^,]*)\\/x,(.*)$/$1/,DEFAULT", "CN=a/x,O=b", "a"),
        (" RULE:^CN=(.*?),.*$/$1/ , DEFAULT ", DN, "kafka1"),
    ],
)
def test_mapping_rules(rules, dn, name):
    assert SslPrincipalBuilder(rules).name(dn) == name


def test_no_rule_applies():
    builder = SslPrincipalBuilder("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRule, match="no ssl.principal.mapping.rules rule applies to O=acme,CN=app"):
        builder.name("O=acme,CN=app")


@pytest.mark.parametrize(
    "rules",
    ["DEFAULT/L", "RULE:/", "RULE:^CN=(.*?)$/$1/LU", "RULE:^CN=(.*?)$/$1/x", "NONSENSE",
     "RULE:^CN=((.*?)$/$1/", "RULE:^CN=(.*?)$/$$1/"],
)
def test_invalid_rules_are_refused(rules):
    with pytest.raises(InvalidRules):
        parseRules(rules)


def test_config_key():
    assert BrokerConfig({})["ssl.principal.mapping.rules"] == "DEFAULT"
    with pytest.raises(ConfigError, match="Invalid value for ssl.principal.mapping.rules"):
        BrokerConfig({"ssl.principal.mapping.rules": "RULE:^CN=(.*?)$/$1/LU"})
