"""
Example drop-in: an authorizer that reads its rules from a policy file
instead of keeping ACLs, selected with
C{authorizer.class.name=example.PolicyFileAuthorizer}.

What it shows:

  - providing L{IAuthorizer} from a plugin (L{AuthorizerPlugin}), found on
    C{plugin.paths} like request handler plugins;
  - a check that is cheap on the hot path: the rules are parsed into one
    table per resource type when the file changes, answers are cached per
    (principal, operation, resource) until it changes again, and the file's
    modification time is looked at no more than once a second;
  - ACLs as a read-only view: DescribeAcls lists the rules as ACLs, and
    CreateAcls/DeleteAcls are refused with POLICY_VIOLATION, since the file
    is the one place rules live.

The policy file
===============

C{$KAFKATWIST_POLICY_FILE}, or C{policy.txt} next to this module.  One rule
per line; C{#} starts a comment::

    # effect  principal     operations          resource
    allow     User:admin    ALL                 cluster
    allow     User:alice    WRITE,DESCRIBE      topic:orders
    allow     User:*        READ                topic:public-*
    allow     User:alice    READ                group:billing-*
    deny      User:mallory  ALL                 topic:*

  - effect: C{allow} or C{deny}; a matching deny wins; no matching rule
    means no;
  - principal: C{User:<name>} or C{User:*};
  - operations: Kafka's names, comma separated, or C{ALL}; as in Kafka an
    allowed READ, WRITE, DELETE or ALTER also allows DESCRIBE, and
    ALTER_CONFIGS allows DESCRIBE_CONFIGS;
  - resource: C{topic:}, C{group:} or C{transactional_id:} and a name, where
    a trailing C{*} makes it a prefix (C{*} alone: everything), or
    C{cluster}.

A line that cannot be parsed is logged and skipped; a missing file allows
nothing (super users aside: C{super.users} is not consulted here, write an
C{allow ... ALL} rule for them).
"""

from __future__ import annotations

import os
import threading
import time

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IAuthorizer
from kafkatwist.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkatwist.security.authorizer import aclResult
from kafkatwist.security.plugin import AuthorizerPlugin

log = Logger()

NAME = "example.PolicyFileAuthorizer"
DEFAULT_POLICY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy.txt")
#: how often the file's modification time is looked at
RECHECK_SECONDS = 1.0

_RESOURCE_TYPES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
}


def parsePolicy(text: str, source: str = "<policy>") -> list[AclBinding]:
    """
    @return: the rules, as the ACLs they amount to.
    """
    rules = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            rules.extend(_parseRule(line))
        except (ValueError, KeyError) as e:
            log.warn("Skipping line {number} of {source}: {error}", number=number, source=source, error=e)
    return rules


def _parseRule(line: str) -> list[AclBinding]:
    effect, principal, operations, resource = line.split()
    permission = {"allow": AclPermissionType.ALLOW, "deny": AclPermissionType.DENY}[effect.lower()]
    if not principal.startswith("User:") or len(principal) == len("User:"):
        raise ValueError(f"principal {principal!r} is not User:<name>")
    ops = [AclOperation[op.strip().upper()] for op in operations.split(",")]
    if any(op in (AclOperation.ANY, AclOperation.UNKNOWN) for op in ops):
        raise ValueError(f"bad operation in {operations!r}")
    if resource.lower() == "cluster":
        kind, name, pattern = ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL
    else:
        prefix, sep, name = resource.partition(":")
        kind = _RESOURCE_TYPES[prefix.lower()]
        if not sep or not name:
            raise ValueError(f"resource {resource!r} has no name")
        pattern = PatternType.LITERAL
        if name.endswith("*") and name != WILDCARD:
            name, pattern = name[:-1], PatternType.PREFIXED
    return [AclBinding(kind, name, pattern, principal, WILDCARD, op, permission) for op in ops]


class _Rules:
    """
    One version of the policy: rules per resource type, and a cache.
    """

    def __init__(self, bindings: list[AclBinding]) -> None:
        self.bindings = bindings
        self.byType: dict[ResourceType, list[AclBinding]] = {}
        for binding in bindings:
            self.byType.setdefault(binding.resourceType, []).append(binding)
        self.cache: dict[tuple, bool] = {}

    def allows(self, principal: str, operation, resourceType, name: str) -> bool:
        key = (principal, operation, resourceType, name)
        answer = self.cache.get(key)
        if answer is None:
            answer = False
            for binding in self.byType.get(resourceType, ()):
                if not _applies(binding, name):
                    continue
                result = aclResult(binding, principal, WILDCARD, operation)
                if result == AclPermissionType.DENY:
                    answer = False
                    break
                if result == AclPermissionType.ALLOW:
                    answer = True
            if len(self.cache) > 100_000:
                self.cache.clear()
            self.cache[key] = answer
        return answer


def _applies(binding: AclBinding, name: str) -> bool:
    if binding.patternType == PatternType.PREFIXED:
        return name.startswith(binding.resourceName)
    return binding.resourceName in (name, WILDCARD)


@implementer(IAuthorizer)
class PolicyFileAuthorizer:
    def __init__(self, path: str, monotonic=time.monotonic) -> None:
        self.path = path
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._mtime: int | None = None
        self._loaded = False
        self._nextCheck = 0.0
        self._rules = _Rules([])
        self._reload()

    def _reload(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if self._loaded and mtime == self._mtime:
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                rules = parsePolicy(f.read(), self.path)
        except FileNotFoundError:
            log.warn("Policy file {path} does not exist: nothing is allowed", path=self.path)
            rules = []
        self._mtime = mtime
        self._loaded = True
        self._rules = _Rules(rules)
        log.info("Loaded {count} rule(s) from {path}", count=len(rules), path=self.path)

    def _current(self) -> _Rules:
        now = self.monotonic()
        if now >= self._nextCheck:
            # One thread looks at the file; the others use the rules they have.
            if self._lock.acquire(blocking=False):
                try:
                    self._nextCheck = now + RECHECK_SECONDS
                    self._reload()
                finally:
                    self._lock.release()
        return self._rules

    # -- IAuthorizer ------------------------------------------------------------

    def authorize(self, context, actions):
        rules = self._current()
        principal = context.principal
        return [rules.allows(principal, a.operation, a.resourceType, a.resourceName) for a in actions]

    def authorizeByResourceType(self, context, operation, resourceType):
        principal = context.principal
        rules = self._current().byType.get(resourceType, ())
        for binding in rules:
            if binding.permissionType != AclPermissionType.DENY:
                continue
            if binding.resourceName == WILDCARD and binding.principal in (principal, WILDCARD_PRINCIPAL) and (
                binding.operation in (operation, AclOperation.ALL)
            ):
                return False
        return any(
            binding.permissionType == AclPermissionType.ALLOW
            and binding.principal in (principal, WILDCARD_PRINCIPAL)
            and binding.operation in (operation, AclOperation.ALL)
            for binding in rules
        )

    def acls(self, aclFilter):
        return [binding for binding in self._current().bindings if aclFilter.matches(binding)]

    def _readOnly(self):
        return KafkaError(ErrorCode.policy_violation, f"ACLs are managed in the policy file {self.path}")

    def createAcls(self, context, bindings):
        return [self._readOnly() for _ in bindings]

    def deleteAcls(self, context, filters):
        return [(self._readOnly(), []) for _ in filters]

    def close(self):
        pass


policyFileAuthorizer = AuthorizerPlugin(
    NAME, lambda broker: PolicyFileAuthorizer(os.environ.get("KAFKATWIST_POLICY_FILE", DEFAULT_POLICY))
)
