"""
The principal of a client certificate, as Kafka names it.

Kafka's default principal builder takes the subject as the JVM prints it
(C{X500Principal.getName()}, RFC 2253), passes it through
C{ssl.principal.mapping.rules}, and prefixes C{User:}.  So
C{openssl req -subj "/CN=app/O=acme"} gives C{User:O=acme,CN=app}: RFC 2253
writes the last RDN first.

L{rfc2253} reproduces the JVM's rendering from the subject's DER, including
its choices beyond the RFC (checked against Java 17): only C{CN}, C{C},
C{L}, C{ST}, C{O}, C{OU}, C{STREET}, C{DC} and C{UID} get a keyword, any
other attribute (C{emailAddress}, C{serialNumber}, C{title}...) is the
dotted OID and C{#} plus the hex of its DER value; C{,=+<>#;"\\} are
escaped wherever they occur, as are leading and trailing spaces; string
values are read as UTF-8 whatever their ASN.1 type.

Rules (Kafka's syntax), comma separated, first match wins::

    RULE:pattern/replacement/[L|U]   pattern must match the whole DN;
                                     $1.. are its groups; L/U lower/upper-case
    DEFAULT                          the DN unchanged

No rule matching is an authentication failure (the connection is closed).
"""

from __future__ import annotations

import re

#: attribute keywords the JVM writes in RFC 2253 names
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
#: string types the JVM renders as text (others as #hex); it reads the bytes
#: of every one of them as UTF-8, BMPString included (so "Ü" as a BMPString,
#: 00 DC, comes out as "\\00" and U+FFFD): Kafka's principal is that text
_STRING_TAGS = {
    0x0C,  # UTF8String
    0x13,  # PrintableString
    0x14,  # T61String
    0x16,  # IA5String
    0x1B,  # GeneralString
    0x1E,  # BMPString
}
_ESCAPED = set(',=+<>#;"\\')

DEFAULT_RULES = "DEFAULT"


class NoMatchingRule(Exception):
    """
    No C{ssl.principal.mapping.rules} rule applies to a certificate's DN.
    """


class InvalidRules(ValueError):
    pass


# -- DER -----------------------------------------------------------------------


def _readTlv(data: bytes, offset: int) -> tuple[int, int, int, int]:
    """
    @return: (tag, start of the value, end of the value, end of the TLV).
    """
    if offset + 2 > len(data):
        raise ValueError("truncated DER")
    tag = data[offset]
    length = data[offset + 1]
    start = offset + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or start + count > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[start:start + count], "big")
        start += count
    end = start + length
    if end > len(data):
        raise ValueError("truncated DER")
    return tag, start, end, end


def _children(data: bytes, start: int, end: int):
    """
    @return: (tag, start of the TLV, start of the value, end of the value)
        of each element between C{start} and C{end}.
    """
    offset = start
    while offset < end:
        tlvStart = offset
        tag, valueStart, valueEnd, offset = _readTlv(data, offset)
        yield tag, tlvStart, valueStart, valueEnd


def _oid(encoded: bytes) -> str:
    first = encoded[0]
    parts = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    value = 0
    for byte in encoded[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(str(p) for p in parts)


def rfc2253(nameDer: bytes) -> str:
    """
    The DN the JVM's C{X500Principal.getName()} gives for an X.509 C{Name}
    in DER (e.g. C{certificate.subject.public_bytes()}).
    """
    tag, start, end, _ = _readTlv(nameDer, 0)
    if tag != 0x30:
        raise ValueError("a Name is a SEQUENCE")
    rdns = []
    for _, _, setStart, setEnd in _children(nameDer, start, end):
        avas = []
        for _, _, avaStart, avaEnd in _children(nameDer, setStart, setEnd):
            (_, _, oidStart, oidEnd), (valueTag, tlvStart, valueStart, valueEnd) = list(
                _children(nameDer, avaStart, avaEnd)
            )[:2]
            oid = _oid(nameDer[oidStart:oidEnd])
            avas.append(_ava(oid, valueTag, nameDer[valueStart:valueEnd], nameDer[tlvStart:valueEnd]))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _ava(oid: str, tag: int, value: bytes, tlv: bytes) -> str:
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{tlv.hex()}"
    return f"{keyword}={_escape(value.decode('utf-8', 'replace'))}"


def _escape(text: str) -> str:
    out = []
    for c in text:
        if c in _ESCAPED:
            out.append("\\" + c)
        elif c == "\x00":
            out.append("\\00")
        else:
            out.append(c)
    escaped = "".join(out)
    # Every leading and trailing space (or CR) is escaped, not only the outermost.
    body = escaped.strip(" \r")
    if not body:
        return "".join("\\" + c for c in escaped)
    lead = escaped[: len(escaped) - len(escaped.lstrip(" \r"))]
    trail = escaped[len(escaped.rstrip(" \r")):]
    return "".join("\\" + c for c in lead) + body + "".join("\\" + c for c in trail)


# -- ssl.principal.mapping.rules -----------------------------------------------


class _Rule:
    def __init__(self, pattern: str | None, replacement: str = "", case: str = "") -> None:
        self.pattern = pattern
        self.replacement = replacement
        self.case = case
        self.regex = None
        if pattern is not None:
            try:
                self.regex = re.compile(pattern)
            except re.error as e:
                raise InvalidRules(f"RULE:{pattern}/{replacement}/: bad pattern: {e}") from None
            self.parts = _replacementParts(replacement, self.regex.groups, self)

    def apply(self, dn: str) -> str | None:
        if self.regex is None:
            return dn
        if self.regex.fullmatch(dn) is None:
            return None
        parts = self.parts
        result = self.regex.sub(
            lambda m: "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts), dn
        )
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.regex is None:
            return "DEFAULT"
        return f"RULE:{self.pattern}/{self.replacement}/{self.case}"


def _replacementParts(replacement: str, groups: int, rule) -> list:
    """
    Java's replacement syntax: C{$n} is group n (as many digits as name an
    existing group), C{\\x} is a literal x; a C{$n} beyond the groups is
    literal text, as Kafka makes it.
    """
    parts: list = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            parts.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 2
            number = int(replacement[i + 1])
            while j < len(replacement) and replacement[j].isdigit() and number * 10 + int(replacement[j]) <= groups:
                number = number * 10 + int(replacement[j])
                j += 1
            if 0 < number <= groups or number == 0:
                parts.append(number)
            else:
                parts.append(replacement[i:j])
            i = j
        elif c == "$":
            raise InvalidRules(f"{rule}: '$' must be followed by a group number (write \\$ for a dollar)")
        else:
            parts.append(c)
            i += 1
    return parts


def _readUntilSlash(text: str, i: int) -> tuple[str, int]:
    """
    Up to the next unescaped C{/}; backslash pairs are kept as written.
    """
    start = i
    while i < len(text) and text[i] != "/":
        i += 2 if text[i] == "\\" else 1
    if i >= len(text):
        raise InvalidRules(f"missing '/' in {text[start:]!r}")
    return text[start:i], i + 1


def parseRules(text: str | None) -> list[_Rule]:
    """
    @raise InvalidRules: with the offending rule.
    """
    text = (text or DEFAULT_RULES).strip()
    rules: list[_Rule] = []
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("DEFAULT", i):
            rules.append(_Rule(None))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern, i = _readUntilSlash(text, i + len("RULE:"))
            replacement, i = _readUntilSlash(text, i)
            case = ""
            if i < len(text) and text[i] in "LU":
                case = text[i]
                i += 1
            rules.append(_Rule(pattern, replacement, case))
        elif text[i] != ",":
            end = text.find(",", i)
            raise InvalidRules(f"invalid rule: {text[i:] if end < 0 else text[i:end]!r}")
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text):
            if text[i] != ",":
                raise InvalidRules(f"invalid rule: unexpected {text[i:]!r}")
            i += 1
    return rules


class SslPrincipalBuilder:
    """
    Certificate -> C{User:<mapped DN>}.  Built once from the configuration;
    called on Processor threads (it holds no mutable state).
    """

    def __init__(self, rules: str | None = DEFAULT_RULES) -> None:
        self.rules = parseRules(rules)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(
            f"no ssl.principal.mapping.rules rule applies to {dn} "
            f"(rules: {', '.join(str(r) for r in self.rules)})"
        )

    def __call__(self, certificate) -> str:
        """
        @param certificate: a pyOpenSSL C{X509} or a C{cryptography}
            certificate.
        """
        if hasattr(certificate, "get_subject"):
            subject = certificate.get_subject().der()
        else:
            subject = certificate.subject.public_bytes()
        return "User:" + self.name(rfc2253(subject))


defaultSslPrincipal = SslPrincipalBuilder()
