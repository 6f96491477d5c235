"""
Kafka's ACL model: resource patterns, access control entries, the filters
DescribeAcls and DeleteAcls match them with, and the codes the wire uses.

Names and codes are Kafka's (C{org.apache.kafka.common.acl},
C{org.apache.kafka.common.resource}); unknown codes read as C{UNKNOWN}, as
Kafka's C{fromCode} does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Action",
    "PatternType",
    "ResourceType",
    "SUPPORTED_OPERATIONS",
    "operationsBitfield",
    "validPrincipal",
]

#: the one CLUSTER resource's name
CLUSTER_NAME = "kafka-cluster"
#: a LITERAL resource name, or an ACL host, matching everything
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class _Coded(enum.IntEnum):
    @classmethod
    def fromCode(cls, code: int):
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_O = AclOperation
#: what each resource type can be asked for (Kafka's AclEntry.supportedOperations);
#: the authorized-operations fields are computed over these
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        _O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        _O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER,
        _O.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


def operationsBitfield(operations) -> int:
    """
    The 32-bit field of the authorized-operations response fields: bit
    C{op.code} set for each operation.
    """
    field = 0
    for operation in operations:
        field |= 1 << int(operation)
    return field


def validPrincipal(principal: str) -> bool:
    """
    Kafka's C{SecurityUtils.parseKafkaPrincipal}: C{Type:name}, both parts
    present.
    """
    kind, sep, name = principal.partition(":")
    return bool(sep and kind and name)


class Action(NamedTuple):
    """
    One thing to authorize (Kafka's C{Action}; resource names are always
    LITERAL here).

    @ivar logIfAllowed: an allowed access is audit-logged (at debug).
    @ivar logIfDenied: a denied access is audit-logged (at info); false
        when only filtering (Metadata for all topics) or computing
        authorized operations.
    """

    operation: AclOperation
    resourceType: ResourceType
    resourceName: str
    logIfAllowed: bool = True
    logIfDenied: bool = True


@dataclass(frozen=True, order=True)
class AclBinding:
    """
    One ACL: a resource pattern and an access control entry.  Ordered by
    resource, then entry, for stable listings and files.
    """

    resourceType: ResourceType
    resourceName: str
    patternType: PatternType
    principal: str
    host: str
    operation: AclOperation
    permissionType: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(pattern=ResourcePattern(resourceType={self.resourceType.name}, name={self.resourceName}, "
            f"patternType={self.patternType.name}), entry=(principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permissionType.name}))"
        )

    def toRecord(self) -> dict:
        return {
            "resourceType": self.resourceType.name,
            "resourceName": self.resourceName,
            "patternType": self.patternType.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permissionType": self.permissionType.name,
        }

    @classmethod
    def fromRecord(cls, record: dict) -> "AclBinding":
        """
        @raise KeyError, ValueError, TypeError: a damaged record.
        """
        binding = cls(
            ResourceType[record["resourceType"]],
            str(record["resourceName"]),
            PatternType[record["patternType"]],
            str(record["principal"]),
            str(record["host"]),
            AclOperation[record["operation"]],
            AclPermissionType[record["permissionType"]],
        )
        problem = binding.problem()
        if problem:
            raise ValueError(problem)
        return binding

    def problem(self) -> str | None:
        """
        Why this ACL cannot be created (Kafka's C{AclControlManager.validateNewAcl}
        and the CreateAcls checks), or C{None}.
        """
        if self.resourceType in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"Invalid resourceType {self.resourceType.name}"
        if self.patternType not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid patternType {self.patternType.name}"
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"Invalid operation {self.operation.name}"
        if self.permissionType not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
            return f"Invalid permissionType {self.permissionType.name}"
        if not self.resourceName:
            return "Resource name should not be empty"
        if self.resourceType == ResourceType.CLUSTER and self.resourceName != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if not validPrincipal(self.principal):
            return f"expected a string in format principalType:principalName but got {self.principal}"
        if not self.host:
            return "Invalid empty host"
        return None


@dataclass(frozen=True)
class AclBindingFilter:
    """
    What DescribeAcls and DeleteAcls select ACLs with.  C{None} fields match
    anything; C{ANY} codes match any value; a C{MATCH} pattern type selects
    every pattern that would apply to the named resource.
    """

    resourceType: ResourceType = ResourceType.ANY
    resourceName: str | None = None
    patternType: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permissionType: AclPermissionType = AclPermissionType.ANY

    def isUnknown(self) -> bool:
        return any(
            value.name == "UNKNOWN"
            for value in (self.resourceType, self.patternType, self.operation, self.permissionType)
        )

    def matchesPattern(self, binding: AclBinding) -> bool:
        """
        Kafka's C{ResourcePatternFilter.matches}.
        """
        if self.resourceType != ResourceType.ANY and self.resourceType != binding.resourceType:
            return False
        if self.patternType not in (PatternType.ANY, PatternType.MATCH) and self.patternType != binding.patternType:
            return False
        if self.resourceName is None:
            return True
        if self.patternType in (PatternType.ANY, binding.patternType):
            return self.resourceName == binding.resourceName
        if binding.patternType == PatternType.LITERAL:
            return self.resourceName == binding.resourceName or binding.resourceName == WILDCARD
        return self.resourceName.startswith(binding.resourceName)

    def matchesEntry(self, binding: AclBinding) -> bool:
        """
        Kafka's C{AccessControlEntryFilter.matches}.
        """
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != binding.operation:
            return False
        return self.permissionType == AclPermissionType.ANY or self.permissionType == binding.permissionType

    def matches(self, binding: AclBinding) -> bool:
        return self.matchesPattern(binding) and self.matchesEntry(binding)


MATCH_ALL = AclBindingFilter()
