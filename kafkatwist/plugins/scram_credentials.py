"""
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), v0,
over the broker's SCRAM credential store (Kafka's C{ScramImage.describe} and
C{ScramControlManager.alterCredentials}).

Describing needs DESCRIBE on the cluster and altering ALTER.  An upsertion
carries the salted password, never the password; it is turned into
StoredKey and ServerKey here and only those are kept.  All changes of one
request are written at once, before the answer.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.security.acl import AclOperation
from kafkatwist.security.checks import CLUSTER_AUTHORIZATION_FAILED_MESSAGE, authorizeCluster
from kafkatwist.security.scram import BY_TYPE, credentialFromSaltedPassword

log = Logger()

_DUPLICATE_DESCRIBE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_MISSING_DESCRIBE = "Attempt to describe a user credential that does not exist: "
_DUPLICATE_ALTER = "A user credential cannot be altered twice in the same request"


def _unique(names):
    return list(dict.fromkeys(names))


class DescribeUserScramCredentialsHandler(Handler):
    apiKey = DESCRIBE_USER_SCRAM_CREDENTIALS
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        cls = responseType(DESCRIBE_USER_SCRAM_CREDENTIALS, context.apiVersion)
        Result = nested(cls, "DescribeUserScramCredentialsResult")
        Info = nested(cls, "CredentialInfo")
        asked = [user.name for user in request.users or ()]
        if not authorizeCluster(self.authorizer, context, AclOperation.DESCRIBE):
            code, message = ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE
            results = tuple(
                make(Result, user=name, error_code=code, error_message=message, credential_infos=())
                for name in _unique(asked)
            )
            return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=message, results=results)
        store = self.broker.scramCredentials
        counts: dict[str, int] = {}
        for name in asked:
            counts[name] = counts.get(name, 0) + 1
        names = list(counts) if asked else store.users()
        results = []
        for name in names:
            if counts.get(name, 1) > 1:
                code, message, infos = ErrorCode.duplicate_resource, _DUPLICATE_DESCRIBE + name, ()
            else:
                credentials = store.credentials(name)
                infos = tuple(
                    make(Info, mechanism=mechanism.type, iterations=credentials[mechanism.name].iterations)
                    for mechanism in BY_TYPE.values()
                    if mechanism.name in credentials
                )
                if infos:
                    code, message = ErrorCode.none, None
                else:
                    code, message = ErrorCode.resource_not_found, _MISSING_DESCRIBE + name
            results.append(make(Result, user=name, error_code=code, error_message=message, credential_infos=infos))
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, results=tuple(results))


def _checkNameAndMechanism(name: str, mechanismType: int):
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanismType not in BY_TYPE:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


class AlterUserScramCredentialsHandler(Handler):
    apiKey = ALTER_USER_SCRAM_CREDENTIALS
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        cls = responseType(ALTER_USER_SCRAM_CREDENTIALS, context.apiVersion)
        Result = nested(cls, "AlterUserScramCredentialsResult")

        def result(name, code=ErrorCode.none, message=None):
            return make(Result, user=name, error_code=code, error_message=message)

        if not authorizeCluster(self.authorizer, context, AclOperation.ALTER):
            names = _unique([d.name for d in request.deletions] + [u.name for u in request.upsertions])
            results = tuple(
                result(name, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
                for name in names
            )
            return make(cls, throttle_time=NO_THROTTLE, results=results)
        store = self.broker.scramCredentials
        errors: dict[str, tuple] = {}
        deletions: dict[str, object] = {}
        upsertions: dict[str, object] = {}
        for deletion in request.deletions:
            name = deletion.name
            if name in errors:
                continue
            if deletions.pop(name, None) is not None:
                errors[name] = (ErrorCode.duplicate_resource, _DUPLICATE_ALTER)
                continue
            problem = _checkNameAndMechanism(name, deletion.mechanism)
            if problem is None and store.get(name, BY_TYPE[deletion.mechanism].name) is None:
                problem = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
            if problem:
                errors[name] = problem
            else:
                deletions[name] = deletion
        for upsertion in request.upsertions:
            name = upsertion.name
            if name in errors:
                continue
            if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
                errors[name] = (ErrorCode.duplicate_resource, _DUPLICATE_ALTER)
                continue
            problem = _checkNameAndMechanism(name, upsertion.mechanism)
            if problem is None:
                mechanism = BY_TYPE[upsertion.mechanism]
                if upsertion.iterations < mechanism.minIterations:
                    problem = (ErrorCode.unacceptable_credential, "Too few iterations")
                elif upsertion.iterations > mechanism.maxIterations:
                    problem = (ErrorCode.unacceptable_credential, "Too many iterations")
                elif not upsertion.salt or not upsertion.salted_password:
                    problem = (ErrorCode.unacceptable_credential, "Salt and salted password must not be empty")
            if problem:
                errors[name] = problem
            else:
                upsertions[name] = upsertion
        changes = [
            (name, BY_TYPE[u.mechanism].name, credentialFromSaltedPassword(
                BY_TYPE[u.mechanism], u.salted_password, u.salt, u.iterations))
            for name, u in upsertions.items()
        ]
        removals = [(name, BY_TYPE[d.mechanism].name) for name, d in deletions.items()]
        results = []
        if changes or removals:
            try:
                store.alter(changes, removals)
            except OSError as e:
                failed = (ErrorCode.unknown_server_error, f"Could not store the credentials: {e.strerror}")
                errors.update({name: failed for name in [*deletions, *upsertions]})
                deletions, upsertions = {}, {}
            else:
                for name, mechanism in removals:
                    log.info("{principal} removed the {mechanism} credential of {user!r}",
                             principal=context.principal, mechanism=mechanism, user=name)
                for name, mechanism, _ in changes:
                    log.info("{principal} set the {mechanism} credential of {user!r}",
                             principal=context.principal, mechanism=mechanism, user=name)
        results += [result(name) for name in deletions]
        results += [result(name) for name in upsertions]
        results += [result(name, code, message) for name, (code, message) in errors.items()]
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


describeUserScramCredentials = HandlerPlugin(
    "builtin.describe_user_scram_credentials",
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    DescribeUserScramCredentialsHandler,
    priority=0,
)
alterUserScramCredentials = HandlerPlugin(
    "builtin.alter_user_scram_credentials",
    ALTER_USER_SCRAM_CREDENTIALS,
    AlterUserScramCredentialsHandler,
    priority=0,
)
