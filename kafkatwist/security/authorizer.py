"""
The built-in authorizer: Kafka's C{StandardAuthorizer} semantics over ACLs
kept in C{kafkatwist-acls.json} in the first data directory.

Rules (C{StandardAuthorizerData}):
  - a super user (C{super.users}) may do anything;
  - the ACLs that apply to a resource are the LITERAL ones with its name,
    the LITERAL C{*} ones, and the PREFIXED ones whose name starts it;
  - an ACL applies to a request if its principal is the request's or
    C{User:*} and its host the client's address or C{*};
  - a matching DENY wins over any ALLOW; an ALLOW of READ, WRITE, DELETE or
    ALTER also allows DESCRIBE, and of ALTER_CONFIGS also DESCRIBE_CONFIGS
    (DENY ACLs imply nothing);
  - with no ACL at all on the resource, C{allow.everyone.if.no.acl.found}
    decides; with ACLs on it but none allowing, the answer is no.

Speed: the ACLs are indexed per resource type by literal name and by
prefix, and a prefix lookup tries each distinct prefix length once, so the
cost of a check does not grow with the number of ACLs.  Answers are cached
per (principal, host, operation, resource) in the current snapshot; a
change builds a new snapshot (with an empty cache) and publishes it with one
assignment, so checks never take a lock.
"""

from __future__ import annotations

import os
import threading

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IAuthorizer
from kafkatwist.protocol.apis import apiName
from kafkatwist.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    Action,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkatwist.util.statefile import readRecords, writeRecords

__all__ = ["ACLS_FILE", "StandardAuthorizer", "STANDARD_AUTHORIZER"]

log = Logger()
auditLog = Logger(namespace="kafkatwist.authorizer")

#: what C{authorizer.class.name} names the built-in with, as in Kafka
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

ACLS_FILE = "kafkatwist-acls.json"
_KIND = "acls"
_VERSION = 1

#: cached answers per snapshot before the cache starts over
CACHE_LIMIT = 100_000

_ALLOW = AclPermissionType.ALLOW
_DENY = AclPermissionType.DENY
_ALL = AclOperation.ALL
_IMPLIES = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


def aclResult(binding: AclBinding, principal: str, host: str, operation: AclOperation) -> AclPermissionType | None:
    """
    What C{binding} says about C{operation} by C{principal} from C{host},
    assuming its resource pattern applies (Kafka's C{findResult}).

    @return: ALLOW, DENY, or C{None} if the ACL does not apply.
    """
    if binding.principal != principal and binding.principal != WILDCARD_PRINCIPAL:
        return None
    if binding.host != WILDCARD and binding.host != host:
        return None
    if binding.operation != _ALL:
        if binding.permissionType == _ALLOW:
            implied = _IMPLIES.get(operation)
            if implied is not None:
                if binding.operation not in implied:
                    return None
            elif binding.operation != operation:
                return None
        elif binding.operation != operation:
            return None
    return binding.permissionType


class _ResourceIndex:
    """
    One resource type's ACLs: LITERAL by name (C{*} included), PREFIXED by
    prefix, and the prefix lengths present.
    """

    __slots__ = ("literal", "prefixed", "prefixLengths")

    def __init__(self, bindings) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}
        for binding in bindings:
            table = self.literal if binding.patternType == PatternType.LITERAL else self.prefixed
            table.setdefault(binding.resourceName, []).append(binding)
        self.prefixLengths = sorted({len(prefix) for prefix in self.prefixed})

    def applicable(self, name: str):
        """
        The ACLs whose pattern applies to the resource C{name}.
        """
        found = self.literal.get(name)
        if found:
            yield from found
        if name != WILDCARD:
            found = self.literal.get(WILDCARD)
            if found:
                yield from found
        prefixed = self.prefixed
        size = len(name)
        for length in self.prefixLengths:
            if length > size:
                break
            found = prefixed.get(name[:length])
            if found:
                yield from found


class _Snapshot:
    """
    An immutable set of ACLs with its index and its cache of answers.
    """

    def __init__(self, bindings: frozenset[AclBinding]) -> None:
        self.bindings = bindings
        byType: dict[ResourceType, list[AclBinding]] = {}
        for binding in bindings:
            byType.setdefault(binding.resourceType, []).append(binding)
        self.byType = {kind: _ResourceIndex(found) for kind, found in byType.items()}
        self.cache: dict[tuple, bool | None] = {}

    def decide(self, principal: str, host: str, operation, resourceType, name: str) -> bool | None:
        """
        @return: C{True} (an ALLOW applies), C{False} (a DENY applies, or ACLs
            exist on the resource and none allows), or C{None} (no ACL on the
            resource: the default decides).
        """
        key = (principal, host, operation, resourceType, name)
        cache = self.cache
        try:
            return cache[key]
        except KeyError:
            pass
        index = self.byType.get(resourceType)
        answer: bool | None = None
        if index is not None:
            for binding in index.applicable(name):
                if answer is None:
                    answer = False
                result = aclResult(binding, principal, host, operation)
                if result == _DENY:
                    answer = False
                    break
                if result == _ALLOW:
                    answer = True
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        cache[key] = answer
        return answer


@implementer(IAuthorizer)
class StandardAuthorizer:
    """
    @param path: the ACL file; C{None} keeps ACLs in memory only (tests).
    @param superUsers: principals allowed everything (C{super.users}).
    @param allowEveryoneIfNoAclFound: the answer for a resource without ACLs.
    """

    def __init__(self, path: str | None, superUsers=(), allowEveryoneIfNoAclFound: bool = False) -> None:
        self.path = path
        self.superUsers = frozenset(superUsers)
        self.allowEveryoneIfNoAclFound = allowEveryoneIfNoAclFound
        self._lock = threading.Lock()
        self._snapshot = _Snapshot(frozenset(self._load() if path else ()))

    @classmethod
    def fromConfig(cls, config) -> "StandardAuthorizer":
        return cls(
            os.path.join(config.logDirs[0], ACLS_FILE),
            superUsers=config["super.users"],
            allowEveryoneIfNoAclFound=config["allow.everyone.if.no.acl.found"],
        )

    def _load(self) -> list[AclBinding]:
        bindings = []
        for record in readRecords(self.path, _KIND, _VERSION):
            try:
                bindings.append(AclBinding.fromRecord(record))
            except (KeyError, TypeError, ValueError) as e:
                log.error("Skipping a damaged ACL in {path}: {error} ({record})", path=self.path, error=e, record=record)
        log.info("Authorizer loaded {count} ACL(s) from {path}", count=len(bindings), path=self.path)
        return bindings

    # -- IAuthorizer: checks, from any thread ---------------------------------

    def authorize(self, context, actions) -> list[bool]:
        principal = context.principal
        if principal in self.superUsers:
            return [True] * len(actions)
        host = context.clientAddress[0]
        snapshot = self._snapshot
        default = self.allowEveryoneIfNoAclFound
        results = []
        for action in actions:
            answer = snapshot.decide(principal, host, action.operation, action.resourceType, action.resourceName)
            allowed = default if answer is None else answer
            if not allowed and action.logIfDenied:
                _auditDenied(context, principal, host, action, answer is None)
            results.append(allowed)
        return results

    def authorizeByResourceType(self, context, operation: AclOperation, resourceType: ResourceType) -> bool:
        """
        Kafka's C{Authorizer.authorizeByResourceType}: whether some resource
        of the type could be allowed -- an ALLOW for the operation on a
        literal name or prefix that no DENY covers.
        """
        # A made-up name: super users, and the no-ACL default, answer here.
        if self.authorize(context, [Action(operation, resourceType, "hardcode", True, False)])[0]:
            return True
        principal = context.principal
        host = context.clientAddress[0]
        denyLiteral, denyPrefixed, allowLiteral, allowPrefixed = set(), set(), set(), set()
        wildcardAllow = False
        index = self._snapshot.byType.get(resourceType)
        if index is None:
            return False
        for table, literal in ((index.literal, True), (index.prefixed, False)):
            for bindings in table.values():
                for binding in bindings:
                    if binding.principal not in (principal, WILDCARD_PRINCIPAL):
                        continue
                    if binding.host not in (host, WILDCARD):
                        continue
                    if binding.operation not in (operation, _ALL):
                        continue
                    name = binding.resourceName
                    if binding.permissionType == _DENY:
                        if literal and name == WILDCARD:
                            return False
                        (denyLiteral if literal else denyPrefixed).add(name)
                    elif binding.permissionType == _ALLOW:
                        if literal and name == WILDCARD:
                            # Only once no wildcard DENY turned up.
                            wildcardAllow = True
                        else:
                            (allowLiteral if literal else allowPrefixed).add(name)
        if wildcardAllow:
            return True
        for names, literal in ((allowLiteral, True), (allowPrefixed, False)):
            for name in names:
                if literal and name in denyLiteral:
                    continue
                if not any(name[:i] in denyPrefixed for i in range(1, len(name) + 1)):
                    return True
        return False

    # -- IAuthorizer: ACL management ------------------------------------------

    def acls(self, aclFilter: AclBindingFilter) -> list[AclBinding]:
        return [binding for binding in self._snapshot.bindings if aclFilter.matches(binding)]

    def createAcls(self, context, bindings: list[AclBinding]) -> list[KafkaError | None]:
        results: list[KafkaError | None] = []
        valid = []
        for binding in bindings:
            problem = binding.problem()
            if problem:
                results.append(KafkaError(ErrorCode.invalid_request, problem))
            else:
                results.append(None)
                valid.append(binding)
        if valid:
            with self._lock:
                current = self._snapshot.bindings
                added = [b for b in valid if b not in current]
                if added:
                    try:
                        self._publish(current.union(added))
                    except OSError as e:
                        error = KafkaError(ErrorCode.unknown_server_error, f"Could not store the ACLs: {e.strerror}")
                        return [error if r is None else r for r in results]
                    for binding in added:
                        log.info("{principal} added ACL {acl}", principal=context.principal, acl=str(binding))
        return results

    def deleteAcls(self, context, filters: list[AclBindingFilter]) -> list[tuple[KafkaError | None, list[AclBinding]]]:
        with self._lock:
            current = self._snapshot.bindings
            results: list[tuple[KafkaError | None, list[AclBinding]]] = []
            doomed: set[AclBinding] = set()
            for aclFilter in filters:
                if aclFilter.isUnknown():
                    results.append((KafkaError(ErrorCode.invalid_request, "Unknown patternFilter or entryFilter."), []))
                    continue
                matched = sorted(b for b in current if aclFilter.matches(b))
                doomed.update(matched)
                results.append((None, matched))
            if doomed:
                try:
                    self._publish(current.difference(doomed))
                except OSError as e:
                    error = KafkaError(ErrorCode.unknown_server_error, f"Could not store the ACLs: {e.strerror}")
                    return [(error, []) if err is None else (err, found) for err, found in results]
                for binding in sorted(doomed):
                    log.info("{principal} removed ACL {acl}", principal=context.principal, acl=str(binding))
        return results

    def _publish(self, bindings: frozenset[AclBinding]) -> None:
        # Durable first: an ACL a client was told about survives a crash.
        if self.path:
            writeRecords(self.path, _KIND, _VERSION, [b.toRecord() for b in sorted(bindings)])
        self._snapshot = _Snapshot(frozenset(bindings))

    def aclCount(self) -> int:
        return len(self._snapshot.bindings)

    def close(self) -> None:
        pass


def _auditDenied(context, principal: str, host: str, action: Action, byDefault: bool) -> None:
    # Kafka's authorizer audit line for a refused access (allowed ones are
    # not logged: that would be a log event per produced batch).
    auditLog.info(
        "Principal = {principal} is Denied operation = {operation} from host = {host} on resource = "
        "{resourceType}:LITERAL:{resourceName} for request = {api} based on rule {rule}",
        principal=principal,
        operation=action.operation.name,
        host=host,
        resourceType=action.resourceType.name,
        resourceName=action.resourceName,
        api=apiName(getattr(context, "apiKey", -1)),
        rule="DefaultDeny" if byDefault else "the resource's ACLs",
    )
