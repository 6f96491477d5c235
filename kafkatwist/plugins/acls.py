"""
DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v0-3, over the
configured authorizer (Kafka's C{AclApis}).  v0 predates prefixed ACLs:
its patterns and filters are LITERAL (so a v0 answer never shows a prefixed
ACL), as Kafka reads them.

DescribeAcls needs DESCRIBE on the cluster, the other two ALTER; without it
the answer is CLUSTER_AUTHORIZATION_FAILED (for the whole DescribeAcls, per
item for the others).  Without an authorizer every answer is
SECURITY_DISABLED.  Filters have Kafka's semantics
(L{kafkatwist.security.acl.AclBindingFilter}); codes Kafka does not know
are refused with INVALID_REQUEST.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkatwist.security.checks import CLUSTER_AUTHORIZATION_FAILED_MESSAGE, authorizeCluster

NO_AUTHORIZER = "No Authorizer is configured on the broker"
_UNKNOWN_FILTER = "Filters contain UNKNOWN elements"


def filterFrom(item) -> AclBindingFilter:
    """
    The filter of a DescribeAcls request or a DeleteAcls filter entry.
    """
    return AclBindingFilter(
        ResourceType.fromCode(item.resource_type_filter),
        item.resource_name_filter,
        PatternType.fromCode(item.pattern_type_filter),
        item.principal_filter,
        item.host_filter,
        AclOperation.fromCode(item.operation),
        AclPermissionType.fromCode(item.permission_type),
    )


def bindingFrom(creation) -> AclBinding:
    return AclBinding(
        ResourceType.fromCode(creation.resource_type),
        creation.resource_name,
        PatternType.fromCode(creation.resource_pattern_type),
        creation.principal,
        creation.host,
        AclOperation.fromCode(creation.operation),
        AclPermissionType.fromCode(creation.permission_type),
    )


class DescribeAclsHandler(Handler):
    apiKey = DESCRIBE_ACLS
    minVersion = 0
    maxVersion = 3

    def handle(self, context, request):
        cls = responseType(DESCRIBE_ACLS, context.apiVersion)
        authorizer = self.authorizer

        def error(code, message):
            return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=message, resources=())

        if not authorizeCluster(authorizer, context, AclOperation.DESCRIBE):
            return error(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
        if authorizer is None:
            return error(ErrorCode.security_disabled, NO_AUTHORIZER)
        aclFilter = filterFrom(request)
        if aclFilter.isUnknown():
            return error(ErrorCode.invalid_request, _UNKNOWN_FILTER)
        Resource = nested(cls, "DescribeAclsResource")
        Description = nested(cls, "AclDescription")
        byPattern: dict[tuple, list[AclBinding]] = {}
        for binding in sorted(authorizer.acls(aclFilter)):
            key = (binding.resourceType, binding.resourceName, binding.patternType)
            byPattern.setdefault(key, []).append(binding)
        resources = tuple(
            make(
                Resource,
                resource_type=int(resourceType),
                resource_name=name,
                pattern_type=int(patternType),
                acls=tuple(
                    make(
                        Description,
                        principal=b.principal,
                        host=b.host,
                        operation=int(b.operation),
                        permission_type=int(b.permissionType),
                    )
                    for b in bindings
                ),
            )
            for (resourceType, name, patternType), bindings in byPattern.items()
        )
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, resources=resources)


class CreateAclsHandler(Handler):
    apiKey = CREATE_ACLS
    minVersion = 0
    maxVersion = 3

    def handle(self, context, request):
        cls = responseType(CREATE_ACLS, context.apiVersion)
        Result = nested(cls, "AclCreationResult")
        authorizer = self.authorizer
        creations = request.creations

        def uniform(code, message):
            results = tuple(make(Result, error_code=code, error_message=message) for _ in creations)
            return make(cls, throttle_time=NO_THROTTLE, results=results)

        if not authorizeCluster(authorizer, context, AclOperation.ALTER):
            return uniform(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
        if authorizer is None:
            return uniform(ErrorCode.security_disabled, "No Authorizer is configured.")
        bindings = [bindingFrom(creation) for creation in creations]
        outcome: list = [None] * len(bindings)
        valid = []
        for i, binding in enumerate(bindings):
            # Checked here too: a drop-in authorizer is handed valid ACLs only.
            problem = binding.problem()
            if problem:
                outcome[i] = (ErrorCode.invalid_request, problem)
            else:
                valid.append(i)
        errors = authorizer.createAcls(context, [bindings[i] for i in valid])
        for i, failure in zip(valid, errors):
            outcome[i] = (failure.code, failure.message) if failure is not None else (ErrorCode.none, None)
        results = tuple(make(Result, error_code=code, error_message=message) for code, message in outcome)
        return make(cls, throttle_time=NO_THROTTLE, results=results)


class DeleteAclsHandler(Handler):
    apiKey = DELETE_ACLS
    minVersion = 0
    maxVersion = 3

    def handle(self, context, request):
        cls = responseType(DELETE_ACLS, context.apiVersion)
        FilterResult = nested(cls, "DeleteAclsFilterResult")
        Matching = nested(cls, "DeleteAclsMatchingAcl")
        authorizer = self.authorizer

        def uniform(code, message):
            results = tuple(
                make(FilterResult, error_code=code, error_message=message, matching_acls=())
                for _ in request.filters
            )
            return make(cls, throttle_time=NO_THROTTLE, filter_results=results)

        if not authorizeCluster(authorizer, context, AclOperation.ALTER):
            return uniform(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
        if authorizer is None:
            return uniform(ErrorCode.security_disabled, "No Authorizer is configured.")
        filters = [filterFrom(item) for item in request.filters]
        results = []
        for failure, deleted in authorizer.deleteAcls(context, filters):
            if failure is not None:
                results.append(
                    make(FilterResult, error_code=failure.code, error_message=failure.message, matching_acls=())
                )
                continue
            matching = tuple(
                make(
                    Matching,
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=int(b.resourceType),
                    resource_name=b.resourceName,
                    pattern_type=int(b.patternType),
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permissionType),
                )
                for b in deleted
            )
            results.append(make(FilterResult, error_code=ErrorCode.none, error_message=None, matching_acls=matching))
        return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(results))


describeAcls = HandlerPlugin("builtin.describe_acls", DESCRIBE_ACLS, DescribeAclsHandler, priority=0)
createAcls = HandlerPlugin("builtin.create_acls", CREATE_ACLS, CreateAclsHandler, priority=0)
deleteAcls = HandlerPlugin("builtin.delete_acls", DELETE_ACLS, DeleteAclsHandler, priority=0)
