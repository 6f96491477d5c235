"""
Authorization checks as handlers make them (Kafka's C{AuthHelper}).

Every function takes the broker's authorizer, which is C{None} when
C{authorizer.class.name} is unset: then everything is allowed and nothing is
computed, so the checks cost one comparison on the produce and fetch path.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode
from kafkatwist.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    Action,
    ResourceType,
    operationsBitfield,
)

__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED_MESSAGE",
    "authorize",
    "authorizeCluster",
    "authorizedOperations",
    "clusterOperations",
    "filterAuthorized",
]

#: Kafka's default message for CLUSTER_AUTHORIZATION_FAILED
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."

_FULL_FIELDS = {kind: operationsBitfield(ops) for kind, ops in SUPPORTED_OPERATIONS.items()}


def authorize(
    authorizer,
    context,
    operation: AclOperation,
    resourceType: ResourceType,
    resourceName: str,
    logIfDenied: bool = True,
) -> bool:
    if authorizer is None:
        return True
    return authorizer.authorize(context, [Action(operation, resourceType, resourceName, True, logIfDenied)])[0]


def authorizeCluster(authorizer, context, operation: AclOperation) -> bool:
    return authorize(authorizer, context, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def filterAuthorized(
    authorizer,
    context,
    operation: AclOperation,
    resourceType: ResourceType,
    names,
    logIfDenied: bool = True,
) -> set[str]:
    """
    @return: the names among C{names} the principal may do C{operation} on.
    """
    names = set(names)
    if authorizer is None or not names:
        return names
    ordered = list(names)
    results = authorizer.authorize(
        context, [Action(operation, resourceType, name, True, logIfDenied) for name in ordered]
    )
    return {name for name, ok in zip(ordered, results) if ok}


def authorizedOperations(authorizer, context, resourceType: ResourceType, resourceName: str) -> int:
    """
    The authorized-operations field of Metadata, DescribeGroups and
    DescribeCluster: one bit per operation the principal may do on the
    resource, among those the resource type supports.
    """
    if authorizer is None:
        return _FULL_FIELDS[resourceType]
    ops = SUPPORTED_OPERATIONS[resourceType]
    results = authorizer.authorize(context, [Action(op, resourceType, resourceName, False, False) for op in ops])
    return operationsBitfield(op for op, ok in zip(ops, results) if ok)


def clusterOperations(authorizer, context) -> int:
    """
    The cluster-authorized-operations field (Metadata v8-10,
    DescribeCluster): the cluster's operations the principal may do, or 0
    if it may not DESCRIBE the cluster.
    """
    if not authorize(authorizer, context, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorizedOperations(authorizer, context, ResourceType.CLUSTER, CLUSTER_NAME)


def authorizationError(resourceType: ResourceType) -> ErrorCode:
    """
    The error code Kafka answers when access to a resource of this type is
    refused.
    """
    return _ERRORS[resourceType]


_ERRORS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
    ResourceType.DELEGATION_TOKEN: ErrorCode.delegation_token_authorization_failed,
}
