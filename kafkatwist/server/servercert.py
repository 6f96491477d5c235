"""
Does the server certificate name the host each SSL listener advertises?

Kafka clients check the broker's host name against its certificate (librdkafka,
the Java client and kafka-python all do by default).  They bootstrap from the
address they were given, then reconnect to the advertised one: a certificate
for C{localhost} without C{IP:127.0.0.1}, on a broker advertising
C{127.0.0.1}, passes the bootstrap and then fails with a bare timeout.  The
broker cannot fix that, but it can say so at start.
"""

from __future__ import annotations

import ipaddress

from cryptography import x509
from service_identity import CertificateError, VerificationError
from service_identity.cryptography import verify_certificate_hostname, verify_certificate_ip_address


def firstCertificate(keystore: str) -> x509.Certificate:
    """
    The leaf: the first certificate of a PEM keystore (chain, then key).
    """
    with open(keystore, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())[0]


def names(certificate: x509.Certificate) -> str:
    """
    What the certificate is for, as C{openssl x509 -text} shows it.
    """
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subjectAltName"
    shown = [f"DNS:{n}" for n in san.get_values_for_type(x509.DNSName)]
    shown += [f"IP:{ip}" for ip in san.get_values_for_type(x509.IPAddress)]
    return ", ".join(shown) or "no DNS or IP subjectAltName"


def namesHost(certificate: x509.Certificate, host: str) -> bool:
    """
    Whether a client checking C{host} accepts C{certificate} (subjectAltName
    only, as RFC 6125 clients do).
    """
    check = verify_certificate_ip_address if _isIp(host) else verify_certificate_hostname
    try:
        check(certificate, host)
    except (VerificationError, CertificateError):
        return False
    return True


def advertisedHostWarnings(keystore: str, advertisedListeners) -> list[str]:
    """
    One warning per SSL listener whose advertised host the certificate in
    C{keystore} does not name.
    """
    certificate = firstCertificate(keystore)
    warnings = []
    for listener in advertisedListeners:
        if listener.securityProtocol != "SSL" or namesHost(certificate, listener.host):
            continue
        kind = "IP" if _isIp(listener.host) else "DNS"
        warnings.append(
            f"SSL listener {listener.name} advertises {listener.host}, which the server certificate "
            f"({names(certificate)}) does not name: clients that check host names (Kafka clients do "
            f"by default) will fail after bootstrap. Add {kind}:{listener.host} to its "
            f"subjectAltName, or advertise a name it has (advertised.listeners)."
        )
    return warnings


def _isIp(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
