"""
ACL matching as Kafka's StandardAuthorizer does it, the filters of
DescribeAcls/DeleteAcls, and the authorizer's durable ACL file.
"""

from dataclasses import dataclass

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.interfaces import IAuthorizer
from kafkatwist.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    Action,
    PatternType as P,
    ResourceType as R,
    SUPPORTED_OPERATIONS,
    operationsBitfield,
)
from kafkatwist.security.authorizer import ACLS_FILE, StandardAuthorizer
from zope.interface.verify import verifyObject

ALICE = "User:alice"
BOB = "User:bob"


@dataclass
class Ctx:
    principal: str = ALICE
    clientAddress: tuple = ("10.0.0.1", 5000)
    apiKey: int = 0


def acl(name, op=Op.READ, perm=Perm.ALLOW, principal=ALICE, rtype=R.TOPIC, pattern=P.LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*bindings, **kw):
    a = StandardAuthorizer(None, **kw)
    assert a.createAcls(Ctx(), list(bindings)) == [None] * len(bindings)
    return a


def allowed(a, op, name, rtype=R.TOPIC, ctx=None):
    return a.authorize(ctx or Ctx(), [Action(op, rtype, name)])[0]


def test_provides_the_interface():
    verifyObject(IAuthorizer, StandardAuthorizer(None))


def test_no_acls_uses_the_default():
    assert not allowed(StandardAuthorizer(None), Op.READ, "t")
    assert allowed(StandardAuthorizer(None, allowEveryoneIfNoAclFound=True), Op.READ, "t")


def test_acls_on_the_resource_for_someone_else_deny_by_default():
    # The default applies only to resources with no ACLs at all.
    a = authorizer(acl("t", principal=BOB), allowEveryoneIfNoAclFound=True)
    assert not allowed(a, Op.READ, "t")
    assert allowed(a, Op.READ, "other")


def test_literal_prefixed_and_wildcard_patterns():
    a = authorizer(
        acl("orders", Op.WRITE),
        acl("logs-", Op.READ, pattern=P.PREFIXED),
        acl("*", Op.CREATE),
    )
    assert allowed(a, Op.WRITE, "orders")
    assert not allowed(a, Op.WRITE, "orders2")
    assert allowed(a, Op.READ, "logs-app")
    assert allowed(a, Op.READ, "logs-")
    assert not allowed(a, Op.READ, "logs")
    assert allowed(a, Op.CREATE, "anything")
    # A literal '*' is the wildcard; a prefixed '*' is just a prefix.
    b = authorizer(acl("*", Op.READ, pattern=P.PREFIXED))
    assert not allowed(b, Op.READ, "x")
    assert allowed(b, Op.READ, "*x")


def test_literal_acl_on_a_prefix_of_the_name_does_not_apply():
    a = authorizer(acl("foo"), acl("f", pattern=P.PREFIXED, principal=BOB))
    assert not allowed(a, Op.READ, "foobar")


@pytest.mark.parametrize(
    "granted, asked, expected",
    [
        (Op.READ, Op.DESCRIBE, True),
        (Op.WRITE, Op.DESCRIBE, True),
        (Op.DELETE, Op.DESCRIBE, True),
        (Op.ALTER, Op.DESCRIBE, True),
        (Op.CREATE, Op.DESCRIBE, False),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
        (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),
        (Op.DESCRIBE, Op.READ, False),
        (Op.ALL, Op.IDEMPOTENT_WRITE, True),
        (Op.READ, Op.WRITE, False),
    ],
)
def test_operation_implications(granted, asked, expected):
    assert allowed(authorizer(acl("t", granted)), asked, "t") is expected


def test_deny_wins_and_implies_nothing():
    a = authorizer(acl("t", Op.ALL), acl("t", Op.WRITE, Perm.DENY))
    assert not allowed(a, Op.WRITE, "t")
    assert allowed(a, Op.READ, "t")
    # DENY READ does not deny DESCRIBE.
    b = authorizer(acl("t", Op.DESCRIBE), acl("t", Op.READ, Perm.DENY))
    assert allowed(b, Op.DESCRIBE, "t")
    # A prefixed DENY beats a literal ALLOW, and a wildcard principal DENY everyone.
    c = authorizer(acl("team-a", Op.READ), acl("team", Op.ALL, Perm.DENY, pattern=P.PREFIXED, principal="User:*"))
    assert not allowed(c, Op.READ, "team-a")
    # DENY ALL covers everything.
    d = authorizer(acl("t", Op.READ), acl("t", Op.ALL, Perm.DENY))
    assert not allowed(d, Op.DESCRIBE, "t")


def test_principal_and_host_matching():
    a = authorizer(acl("t", principal="User:*"), acl("u", host="10.0.0.2"))
    assert allowed(a, Op.READ, "t", ctx=Ctx(principal=BOB))
    assert not allowed(a, Op.READ, "u")
    assert allowed(a, Op.READ, "u", ctx=Ctx(clientAddress=("10.0.0.2", 1)))


def test_super_users_are_allowed_everything_even_when_denied():
    a = authorizer(acl("t", Op.ALL, Perm.DENY, principal="User:*"), superUsers={"User:admin"})
    assert allowed(a, Op.DELETE, "t", ctx=Ctx(principal="User:admin"))
    assert not allowed(a, Op.DELETE, "t")


def test_resource_types_are_separate():
    a = authorizer(acl("x", rtype=R.GROUP))
    assert allowed(a, Op.READ, "x", R.GROUP)
    assert not allowed(a, Op.READ, "x", R.TOPIC)


def test_changes_reach_cached_answers():
    a = authorizer(acl("t"))
    assert allowed(a, Op.READ, "t")
    a.createAcls(Ctx(), [acl("t", Op.READ, Perm.DENY)])
    assert not allowed(a, Op.READ, "t")
    a.deleteAcls(Ctx(), [AclBindingFilter(permissionType=Perm.DENY)])
    assert allowed(a, Op.READ, "t")


def test_authorized_operations_bitfield():
    a = authorizer(acl("t", Op.WRITE), acl("t", Op.ALTER_CONFIGS))
    ops = SUPPORTED_OPERATIONS[R.TOPIC]
    results = a.authorize(Ctx(), [Action(op, R.TOPIC, "t", False, False) for op in ops])
    granted = [op for op, ok in zip(ops, results) if ok]
    assert set(granted) == {Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert operationsBitfield(granted) == (1 << 4) | (1 << 8) | (1 << 11) | (1 << 10)


# -- authorizeByResourceType (InitProducerId without a transactional id) -----


@pytest.mark.parametrize(
    "bindings, expected",
    [
        ([], False),
        ([acl("t", Op.WRITE)], True),
        ([acl("t", Op.READ)], False),
        ([acl("t", Op.WRITE), acl("t", Op.WRITE, Perm.DENY)], False),
        ([acl("t", Op.WRITE), acl("t", Op.WRITE, Perm.DENY, pattern=P.PREFIXED)], False),
        ([acl("t", Op.WRITE, pattern=P.PREFIXED), acl("t", Op.WRITE, Perm.DENY)], True),
        ([acl("*", Op.WRITE)], True),
        ([acl("*", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)], False),
        ([acl("t", Op.ALL, principal="User:*")], True),
        ([acl("t", Op.WRITE, principal=BOB)], False),
    ],
)
def test_authorize_by_resource_type(bindings, expected):
    assert authorizer(*bindings).authorizeByResourceType(Ctx(), Op.WRITE, R.TOPIC) is expected


def test_authorize_by_resource_type_super_user_and_default():
    assert StandardAuthorizer(None, superUsers={ALICE}).authorizeByResourceType(Ctx(), Op.WRITE, R.TOPIC)
    assert StandardAuthorizer(None, allowEveryoneIfNoAclFound=True).authorizeByResourceType(Ctx(), Op.WRITE, R.TOPIC)


# -- filters -------------------------------------------------------------------


FILTER_ACLS = [
    acl("orders"),
    acl("ord", pattern=P.PREFIXED),
    acl("*"),
    acl("orders", Op.WRITE, principal=BOB, host="10.0.0.9"),
    acl("g", rtype=R.GROUP),
    acl(CLUSTER_NAME, Op.ALTER, rtype=R.CLUSTER),
]


@pytest.mark.parametrize(
    "aclFilter, expected",
    [
        (AclBindingFilter(), {0, 1, 2, 3, 4, 5}),
        (AclBindingFilter(resourceType=R.TOPIC), {0, 1, 2, 3}),
        (AclBindingFilter(resourceType=R.TOPIC, resourceName="orders"), {0, 3}),
        (AclBindingFilter(resourceType=R.TOPIC, resourceName="orders", patternType=P.LITERAL), {0, 3}),
        (AclBindingFilter(resourceType=R.TOPIC, resourceName="ord", patternType=P.PREFIXED), {1}),
        (AclBindingFilter(resourceType=R.TOPIC, resourceName="orders", patternType=P.MATCH), {0, 1, 2, 3}),
        (AclBindingFilter(resourceType=R.TOPIC, patternType=P.PREFIXED), {1}),
        (AclBindingFilter(principal=BOB), {3}),
        (AclBindingFilter(host="10.0.0.9"), {3}),
        (AclBindingFilter(operation=Op.ALTER), {5}),
        (AclBindingFilter(permissionType=Perm.DENY), set()),
    ],
)
def test_filters(aclFilter, expected):
    a = authorizer(*FILTER_ACLS)
    assert set(a.acls(aclFilter)) == {FILTER_ACLS[i] for i in expected}


def test_delete_by_filters_reports_what_each_removed():
    a = authorizer(*FILTER_ACLS)
    results = a.deleteAcls(Ctx(), [
        AclBindingFilter(resourceType=R.TOPIC, resourceName="orders"),
        AclBindingFilter(resourceType=R.GROUP),
        AclBindingFilter(resourceType=R.UNKNOWN),
    ])
    assert results[0] == (None, sorted([FILTER_ACLS[0], FILTER_ACLS[3]], key=lambda b: b.principal))
    assert results[1] == (None, [FILTER_ACLS[4]])
    assert results[2][0].code == ErrorCode.invalid_request
    assert set(a.acls(AclBindingFilter())) == {FILTER_ACLS[i] for i in (1, 2, 5)}


@pytest.mark.parametrize(
    "binding, message",
    [
        (acl("t", rtype=R.ANY), "Invalid resourceType ANY"),
        (acl("t", pattern=P.MATCH), "Invalid patternType MATCH"),
        (acl("t", Op.ANY), "Invalid operation ANY"),
        (acl("t", perm=Perm.ANY), "Invalid permissionType ANY"),
        (acl(""), "Resource name should not be empty"),
        (acl("my-cluster", rtype=R.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (acl("t", principal="alice"), "principalType:principalName"),
    ],
)
def test_create_refuses_invalid_acls(binding, message):
    a = StandardAuthorizer(None)
    [error] = a.createAcls(Ctx(), [binding])
    assert error.code == ErrorCode.invalid_request and message in error.message
    assert a.aclCount() == 0


def test_creating_twice_is_one_acl():
    a = authorizer(acl("t"), acl("t"))
    assert a.aclCount() == 1


# -- durability ------------------------------------------------------------------


def test_acls_survive_a_restart(tmp_path):
    path = str(tmp_path / ACLS_FILE)
    a = StandardAuthorizer(path)
    a.createAcls(Ctx(), FILTER_ACLS)
    a.deleteAcls(Ctx(), [AclBindingFilter(resourceType=R.GROUP)])
    again = StandardAuthorizer(path)
    assert set(again.acls(AclBindingFilter())) == set(FILTER_ACLS) - {FILTER_ACLS[4]}
    assert allowed(again, Op.READ, "orders")


def test_a_damaged_acl_line_is_skipped(tmp_path):
    path = tmp_path / ACLS_FILE
    StandardAuthorizer(str(path)).createAcls(Ctx(), [acl("a"), acl("b")])
    lines = path.read_text().splitlines()
    lines.insert(1, '{"resourceType": "TOPIC", "resourceName": "x", "patternType": "BOGUS"}')
    lines.insert(1, "{not json")
    path.write_text("\n".join(lines) + "\n")
    assert StandardAuthorizer(str(path)).aclCount() == 2


def test_unwritable_file_changes_nothing(tmp_path):
    a = StandardAuthorizer(str(tmp_path / "missing-dir" / ACLS_FILE))
    [error] = a.createAcls(Ctx(), [acl("t")])
    assert error.code == ErrorCode.unknown_server_error
    assert a.aclCount() == 0


# -- scale -------------------------------------------------------------------------


def test_ten_thousand_acls_answer_by_index():
    bindings = []
    for i in range(5000):
        bindings.append(acl(f"topic-{i}", Op.WRITE, principal=f"User:u{i % 50}"))
        bindings.append(acl(f"team{i}-", Op.READ, principal=f"User:u{i % 50}", pattern=P.PREFIXED))
    a = StandardAuthorizer(None)
    a.createAcls(Ctx(), bindings)
    assert a.aclCount() == 10_000
    index = a._snapshot.byType[R.TOPIC]
    # Each lookup tries the prefix lengths present, not the 5000 prefixes.
    assert len(index.prefixLengths) < 10
    assert allowed(a, Op.WRITE, "topic-7", ctx=Ctx(principal="User:u7"))
    assert allowed(a, Op.READ, "team42-x", ctx=Ctx(principal="User:u42"))
    assert not allowed(a, Op.WRITE, "topic-7", ctx=Ctx(principal="User:u8"))
