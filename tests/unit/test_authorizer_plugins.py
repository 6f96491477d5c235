"""
Choosing the authorizer with C{authorizer.class.name}: the built-in one by
Kafka's class name, a drop-in by its own, and the example policy-file
authorizer's rules.
"""

import os
from dataclasses import dataclass

import pytest
from zope.interface.verify import verifyObject

from kafkatwist.config import ConfigError
from kafkatwist.errors import ErrorCode
from kafkatwist.interfaces import IAuthorizer
from kafkatwist.security.acl import AclBindingFilter, AclOperation as Op, Action, ResourceType as R
from kafkatwist.security.authorizer import STANDARD_AUTHORIZER, StandardAuthorizer
from kafkatwist.server.authorizer import loadAuthorizer
from tests.unit.helpers import EXAMPLES, loadExample

policy = loadExample("policy_authorizer")


class Config(dict):
    def __init__(self, directory, **values):
        super().__init__({"super.users": [], "allow.everyone.if.no.acl.found": False, **values})
        self.logDirs = [directory]


@dataclass
class Broker:
    config: Config


@dataclass
class Ctx:
    principal: str
    clientAddress: tuple = ("127.0.0.1", 1)
    apiKey: int = 0


def test_no_name_no_authorizer(tmp_path):
    assert loadAuthorizer(Broker(Config(str(tmp_path))), None) is None
    assert loadAuthorizer(Broker(Config(str(tmp_path))), "") is None


def test_kafka_class_name_selects_the_builtin(tmp_path):
    config = Config(str(tmp_path), **{"super.users": ["User:admin"]})
    authorizer = loadAuthorizer(Broker(config), STANDARD_AUTHORIZER)
    assert isinstance(authorizer, StandardAuthorizer)
    assert authorizer.path == os.path.join(str(tmp_path), "kafkatwist-acls.json")
    assert authorizer.authorize(Ctx("User:admin"), [Action(Op.DELETE, R.TOPIC, "t")]) == [True]


def test_unknown_name_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        loadAuthorizer(Broker(Config(str(tmp_path))), "kafka.security.authorizer.AclAuthorizer")
    assert e.value.key == "authorizer.class.name"
    assert STANDARD_AUTHORIZER in e.value.why


def test_dropin_found_on_plugin_paths(tmp_path):
    # A copy under its own module name: this process already imported the
    # example as kafkatwist.dropins.policy_authorizer.
    dropins = tmp_path / "dropins"
    dropins.mkdir()
    with open(os.path.join(EXAMPLES, "policy_authorizer.py")) as f:
        (dropins / "policy_authorizer_copy.py").write_text(f.read())
    authorizer = loadAuthorizer(Broker(Config(str(tmp_path))), policy.NAME, [str(dropins)])
    verifyObject(IAuthorizer, authorizer)
    assert type(authorizer).__name__ == "PolicyFileAuthorizer"


# -- the example's rules ---------------------------------------------------------


def allowed(authorizer, principal, op, rtype, name):
    return authorizer.authorize(Ctx(principal), [Action(op, rtype, name)])[0]


def test_shipped_policy():
    authorizer = policy.PolicyFileAuthorizer(policy.DEFAULT_POLICY)
    assert allowed(authorizer, "User:alice", Op.WRITE, R.TOPIC, "orders")
    assert allowed(authorizer, "User:alice", Op.DESCRIBE, R.TOPIC, "orders")
    assert not allowed(authorizer, "User:alice", Op.READ, R.TOPIC, "orders")
    assert allowed(authorizer, "User:bob", Op.READ, R.TOPIC, "public-news")
    assert allowed(authorizer, "User:bob", Op.DESCRIBE, R.TOPIC, "public-news")
    assert not allowed(authorizer, "User:mallory", Op.READ, R.TOPIC, "public-news")
    assert allowed(authorizer, "User:admin", Op.ALTER, R.CLUSTER, "kafka-cluster")
    assert allowed(authorizer, "User:admin", Op.DELETE, R.TOPIC, "anything")
    assert authorizer.authorizeByResourceType(Ctx("User:alice"), Op.WRITE, R.TOPIC)
    assert not authorizer.authorizeByResourceType(Ctx("User:bob"), Op.WRITE, R.TOPIC)
    assert not authorizer.authorizeByResourceType(Ctx("User:mallory"), Op.READ, R.TOPIC)


def test_policy_is_reread_when_the_file_changes(tmp_path):
    path = tmp_path / "policy.txt"
    path.write_text("allow User:alice READ topic:a\nthis line is wrong\n")
    now = [0.0]
    authorizer = policy.PolicyFileAuthorizer(str(path), monotonic=lambda: now[0])
    assert allowed(authorizer, "User:alice", Op.READ, R.TOPIC, "a")
    path.write_text("deny User:alice READ topic:a\n")
    os.utime(path, ns=(1, 10**18))
    assert allowed(authorizer, "User:alice", Op.READ, R.TOPIC, "a")
    now[0] = 2.0
    assert not allowed(authorizer, "User:alice", Op.READ, R.TOPIC, "a")


def test_missing_policy_allows_nothing(tmp_path):
    authorizer = policy.PolicyFileAuthorizer(str(tmp_path / "none.txt"))
    assert not allowed(authorizer, "User:admin", Op.READ, R.TOPIC, "a")


def test_acls_are_read_only():
    authorizer = policy.PolicyFileAuthorizer(policy.DEFAULT_POLICY)
    listed = authorizer.acls(AclBindingFilter(resourceType=R.TOPIC, resourceName="orders"))
    assert {b.operation for b in listed if b.principal == "User:alice"} == {Op.WRITE, Op.DESCRIBE}
    [error] = authorizer.createAcls(Ctx("User:admin"), [listed[0]])
    assert error.code == ErrorCode.policy_violation
    [(error, deleted)] = authorizer.deleteAcls(Ctx("User:admin"), [AclBindingFilter()])
    assert error.code == ErrorCode.policy_violation and deleted == []
