"""ACL 2.0's pieces without a server: signatures (RocketMQ's own test vectors), resources, the rule that decides,
what each request asks for, and the checks of an admin body."""

from __future__ import annotations

import pytest

from sluice.auth.auth_metadata_manager import AuthMetadataManager
from sluice.auth.authorization_context_builder import build_remoting_contexts
from sluice.auth.model import (
    Acl,
    Action,
    AuthorizationError,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourcePattern,
    ResourceType,
    check_acl,
    deciding_entry,
    parse_acl_info,
)
from sluice.auth.signature import (
    MalformedAuthorization,
    grpc_authorization,
    hmac_sha1_base64,
    parse_grpc_authorization,
    remoting_content,
    sign_remoting,
    signature_matches,
)
from sluice.remoting.codes import RequestCode


def test_signatures_match_rocketmqs_test_vectors() -> None:
    assert hmac_sha1_base64("12345678", b"RocketMQ") == "IUc8rrO/0gDch8CjObLQsW2rsiA="
    assert hmac_sha1_base64("test", b"test") == "DJRRXBXlCVuKh6ULoN87847QX+Y="
    ext = {"topic": "topic-test", "queueId": "0", "bornTimestamp": "117036786441330", "bname": "brokerName-1",
           "AccessKey": "abc"}
    assert b"".join(remoting_content(ext, b"")) == b"abcbrokerName-11170367864413300topic-test"
    cred = parse_grpc_authorization("MQv2-HMAC-SHA1 Credential=abc, SignedHeaders=x-mq-date-time, "
                                    "Signature=D18A9CBCDDBA9041D6693268FEF15A989E64430B", "20231227T194619Z")
    assert (cred.username, cred.signature) == ("abc", "0YqcvN26kEHWaTJo/vFamJ5kQws=")


def test_a_signed_request_verifies_and_any_change_to_a_field_or_the_body_breaks_it() -> None:
    ext = {"b": "orders", "a": "pg"}
    sign_remoting(ext, b"payload", "alice", "secret")
    assert signature_matches("secret", remoting_content(ext, b"payload"), ext["Signature"])
    assert not signature_matches("other", remoting_content(ext, b"payload"), ext["Signature"])
    assert not signature_matches("secret", remoting_content(ext, b"payloaD"), ext["Signature"])
    assert not signature_matches("secret", remoting_content({**ext, "b": "payments"}, b"payload"), ext["Signature"])
    assert not signature_matches("secret", remoting_content(ext, b"payload"), None)


def test_a_grpc_authorization_header_round_trips_and_a_malformed_one_is_refused_in_rocketmqs_words() -> None:
    header = grpc_authorization("ak", "sk", "20260101T000000Z")
    cred = parse_grpc_authorization(header, "20260101T000000Z")
    assert cred.username == "ak" and signature_matches("sk", cred.content, cred.signature)
    with pytest.raises(MalformedAuthorization, match="datetime is null."):
        parse_grpc_authorization(header, None)
    with pytest.raises(MalformedAuthorization, match="authentication header is incorrect."):
        parse_grpc_authorization("MQv2-HMAC-SHA1", "20260101T000000Z")
    with pytest.raises(MalformedAuthorization, match="create authentication context error."):
        parse_grpc_authorization("MQv2-HMAC-SHA1 Credential=a, Signature=zz", "20260101T000000Z")
    assert parse_grpc_authorization(None, None).username is None


@pytest.mark.parametrize("key,parsed", [
    ("*", Resource(ResourceType.ANY, None, ResourcePattern.ANY)),
    ("Topic:*", Resource(ResourceType.TOPIC, None, ResourcePattern.ANY)),
    ("topic:orders*", Resource(ResourceType.TOPIC, "orders", ResourcePattern.PREFIXED)),
    ("Group:g1", Resource(ResourceType.GROUP, "g1", ResourcePattern.LITERAL)),
    ("Cluster:c", Resource(ResourceType.CLUSTER, "c", ResourcePattern.LITERAL)),
    ("Queue:q", None), ("", None),
])
def test_resource_keys_parse_as_rocketmq_reads_them(key: str, parsed: Resource | None) -> None:
    assert Resource.parse(key) == parsed


def _acl(*entries: tuple[str, str, Decision]) -> Acl:
    return Acl("User:u", [Policy(PolicyType.CUSTOM, [
        PolicyEntry(Resource.parse(k), tuple(Action.of(a) for a in acts.split(",")), d)  # type: ignore[arg-type, misc]
        for k, acts, d in entries])])


def _decides(acl: Acl, resource: Resource, *actions: Action) -> Decision | None:
    entry = deciding_entry(acl, resource, actions, "10.0.0.1")
    return None if entry is None else entry.decision


def test_the_most_specific_entry_decides_as_in_rocketmqs_evaluator_tests() -> None:
    allow, deny = Decision.ALLOW, Decision.DENY
    acl = _acl(("*", "Pub,Sub", allow), ("Topic:*", "Pub,Sub", deny), ("Topic:test*", "Pub,Sub", allow),
               ("Topic:test-1", "Pub,Sub", deny))
    assert _decides(acl, Resource.of_topic("test-1"), Action.PUB) is deny
    assert _decides(acl, Resource.of_topic("test-2"), Action.PUB) is allow
    assert _decides(acl, Resource.of_topic("abc"), Action.PUB) is deny
    assert _decides(acl, Resource.of_group("test-2"), Action.SUB) is allow
    longer = _acl(("Topic:test*", "Pub", allow), ("Topic:test_*", "Pub", deny), ("Topic:test_001", "Pub", deny))
    assert _decides(longer, Resource.of_topic("test_002"), Action.PUB) is deny
    assert _decides(longer, Resource.of_topic("testX"), Action.PUB) is allow
    tie = _acl(("Topic:t", "Pub", allow), ("Topic:t", "Pub", deny))
    assert _decides(tie, Resource.of_topic("t"), Action.PUB) is deny
    assert _decides(_acl(("Topic:t", "Sub", allow)), Resource.of_topic("t"), Action.PUB) is None
    assert _decides(_acl(("Topic:t", "All", allow)), Resource.of_topic("t"), Action.GET) is allow


def test_a_default_policy_decides_only_where_no_custom_entry_matches() -> None:
    acl = Acl("User:u", [Policy(PolicyType.DEFAULT, [PolicyEntry(Resource.parse("Topic:*"), (Action.PUB,),  # type: ignore[arg-type]
                                                                 Decision.ALLOW)]),
                         Policy(PolicyType.CUSTOM, [PolicyEntry(Resource.parse("Topic:secret"), (Action.PUB,),  # type: ignore[arg-type]
                                                                Decision.DENY)])])
    assert _decides(acl, Resource.of_topic("secret"), Action.PUB) is Decision.DENY
    assert _decides(acl, Resource.of_topic("public"), Action.PUB) is Decision.ALLOW


def test_source_ip_ranges_limit_an_entry() -> None:
    entry = PolicyEntry(Resource.of_topic("t"), (Action.PUB,), Decision.ALLOW, ("10.0.0.0/8", "192.168.1.7"))
    assert entry.matches_source("10.2.3.4") and entry.matches_source("192.168.1.7")
    assert not entry.matches_source("192.168.1.8") and not entry.matches_source("")


@pytest.mark.parametrize("code,ext,body,expected", [
    (RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "orders"}, b"", [("Topic:orders", "Pub")]),
    (RequestCode.SEND_MESSAGE_V2, {"a": "cg", "b": "%RETRY%cg"}, b"", [("Group:cg", "Sub")]),
    (RequestCode.PULL_MESSAGE, {"topic": "orders", "consumerGroup": "cg"}, b"",
     [("Topic:orders", "Sub"), ("Group:cg", "Sub")]),
    (RequestCode.PULL_MESSAGE, {"topic": "%RETRY%cg", "consumerGroup": "cg"}, b"", [("Group:cg", "Sub")]),
    (RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": "0"}, b"", [("Topic:orders", "Get")]),
    (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "orders"}, b"", [("Topic:orders", "Get")]),
    (RequestCode.QUERY_CONSUMER_OFFSET, {"topic": "orders", "consumerGroup": "cg"}, b"",
     [("Topic:orders", "Sub,Get"), ("Group:cg", "Sub,Get")]),
    (RequestCode.POP_MESSAGE, {"consumerGroup": "cg", "topic": "orders"}, b"",
     [("Group:cg", "Sub"), ("Topic:orders", "Sub")]),
    (RequestCode.END_TRANSACTION, {"topic": "orders"}, b"", [("Topic:orders", "Pub")]),
    (RequestCode.END_TRANSACTION, {}, b"", []),
    (RequestCode.HEART_BEAT, {}, b'{"clientID":"c","consumerDataSet":[{"groupName":"cg","subscriptionDataSet":'
                                 b'[{"topic":"orders"},{"topic":"%RETRY%cg"}]}],"producerDataSet":[]}',
     [("Group:cg", "Sub"), ("Topic:orders", "Sub")]),
    (RequestCode.HEART_BEAT, {}, b'{"clientID":"c","consumerDataSet":[],"producerDataSet":[{"groupName":"pg"}]}',
     []),
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "orders"}, b"", [("Topic:orders", "Create")]),
    (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "orders"}, b"", [("Topic:orders", "Delete")]),
    (RequestCode.AUTH_CREATE_USER, {"username": "x"}, b"", [("Cluster:c1", "Update")]),
    (RequestCode.AUTH_LIST_ACL, {}, b"", [("Cluster:c1", "Get")]),
    (RequestCode.GET_BROKER_RUNTIME_INFO, {}, b"", [("Cluster:c1", "Get")]),
    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b'{"groupName":"cg"}', [("Group:cg", "Create")]),
    # A V2 send mixing long names in is checked on the topic its handler decodes.
    (RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "orders", "topic": "payments"}, b"", [("Topic:payments", "Pub")]),
    (RequestCode.SEND_BATCH_MESSAGE, {"a": "pg", "topic": "payments"}, b"", [("Topic:payments", "Pub")]),
    # A reply's header is a send's: the same decoding, a retry topic checked on its group.
    (RequestCode.SEND_REPLY_MESSAGE_V2, {"a": "pg", "b": "orders", "topic": "payments"}, b"",
     [("Topic:payments", "Pub")]),
    (RequestCode.SEND_REPLY_MESSAGE_V2, {"a": "pg", "b": "C_REPLY_TOPIC"}, b"", [("Topic:C_REPLY_TOPIC", "Pub")]),
    (RequestCode.SEND_REPLY_MESSAGE_V2, {"a": "pg", "b": "%RETRY%cg"}, b"", [("Group:cg", "Sub")]),
    (RequestCode.SEND_REPLY_MESSAGE, {"topic": "C_REPLY_TOPIC"}, b"", [("Topic:C_REPLY_TOPIC", "Pub")]),
    (RequestCode.RECALL_MESSAGE, {"topic": "orders", "recallHandle": "h"}, b"", [("Topic:orders", "Pub")]),
    # Naming nothing where the kind names a topic or group: checked on the cluster, not let through.
    (RequestCode.PULL_MESSAGE, {}, b"", [("Cluster:c1", "Get")]),
    (RequestCode.SEND_MESSAGE_V2, {"a": "pg"}, b"", [("Cluster:c1", "Get")]),
])
def test_each_request_asks_for_what_rocketmq_maps_it_to(code: int, ext: dict[str, str], body: bytes,
                                                        expected: list[tuple[str, str]]) -> None:
    got = [(c.resource.key, ",".join(a.label for a in c.actions))
           for c in build_remoting_contexts(code, ext, body, "c1")]
    assert got == expected


def test_a_body_that_cannot_be_read_is_refused_as_rocketmq_refuses_it() -> None:
    with pytest.raises(AuthorizationError, match="parse authorization context error."):
        build_remoting_contexts(RequestCode.HEART_BEAT, {}, b"{not json", "c1")
    with pytest.raises(AuthorizationError, match="parse authorization context error."):
        build_remoting_contexts(RequestCode.LOCK_BATCH_MQ, {}, b"[1, 2]", "c1")


def test_an_admin_body_is_merged_by_resource_and_its_problems_named() -> None:
    acl = check_acl(parse_acl_info({"subject": "User:u", "policies": [{"entries": [
        {"resource": "Topic:a", "actions": ["Pub", "Bogus"], "decision": "allow"}]}]}, None))
    acl.update_policies(check_acl(parse_acl_info({"subject": "User:u", "policies": [{"entries": [
        {"resource": "Topic:a", "actions": ["Sub"], "decision": "Deny"},
        {"resource": "Topic:b", "actions": ["Sub"], "decision": "Deny"}]}]}, None)).policies)
    assert [(e.resource.key, e.actions, e.decision) for e in acl.policies[0].entries] == [
        ("Topic:a", (Action.SUB,), Decision.DENY), ("Topic:b", (Action.SUB,), Decision.DENY)]
    with pytest.raises(AuthorizationError, match="The actions can not be Any."):
        check_acl(parse_acl_info({"subject": "User:u", "policies": [{"entries": [
            {"resource": "Topic:a", "actions": ["Any"], "decision": "Allow"}]}]}, None))
    with pytest.raises(ValueError, match="The body of acl is null"):
        parse_acl_info({"subject": "User:u", "policies": []}, None)
    with pytest.raises(ValueError, match="at most"):
        parse_acl_info({"subject": "User:u", "policies": [{"entries": [
            {"resource": f"Topic:t{i}", "actions": ["Pub"], "decision": "Allow"} for i in range(10_001)]}]}, None)


def test_the_users_file_survives_a_reload_and_a_corrupt_one_stops_the_load(tmp_path: object) -> None:
    import pathlib

    from sluice.auth.model import User, UserType
    from sluice.common.errors import StoreConfigError
    path = pathlib.Path(str(tmp_path)) / "config" / "auth.json"
    m = AuthMetadataManager(str(path))
    m.create_user(User("alice", "pw")).result(10)
    m.put_acl(check_acl(parse_acl_info({"subject": "User:alice", "policies": [{"entries": [
        {"resource": "Group:g", "actions": ["Sub"], "decision": "Allow"}]}]}, None))).result(10)
    m.ensure_super_user("root", "rootpw")
    m.close()
    again = AuthMetadataManager(str(path))
    again.load()
    assert again.get_user("root").user_type is UserType.SUPER  # type: ignore[union-attr]
    assert again.get_acl("User:alice").to_info() == m.get_acl("User:alice").to_info()  # type: ignore[union-attr]
    path.write_text('{"users": {"bob": {"password": "x"}}, "acls": {}}')
    with pytest.raises(StoreConfigError, match="auth.json"):
        AuthMetadataManager(str(path)).load()


def test_a_subject_in_any_case_is_one_subject_and_a_refused_merge_leaves_the_live_acl_alone(tmp_path: object) -> None:
    import pathlib

    from sluice.auth.auth_metadata_manager import AuthMetadataManager
    from sluice.auth.model import User
    m = AuthMetadataManager(str(pathlib.Path(str(tmp_path)) / "auth.json"))
    m.create_user(User("alice", "pw")).result(10)
    allow = {"subject": "User:alice", "policies": [{"entries": [
        {"resource": "Topic:secret", "actions": ["Pub"], "decision": "Allow"}]}]}
    m.put_acl(check_acl(parse_acl_info(allow, None))).result(10)
    m.put_acl(check_acl(parse_acl_info({"subject": "User:alice", "policies": [{"entries": [
        {"resource": "Topic:other", "actions": ["Sub"], "decision": "Allow"}]}]}, None))).result(10)
    deny = {"subject": "user:alice", "policies": [{"entries": [
        {"resource": "Topic:secret", "actions": ["Pub"], "decision": "Deny"}]}]}
    m.put_acl(check_acl(parse_acl_info(deny, None))).result(10)
    assert list(m.acls) == ["User:alice"]
    assert _decides(m.get_acl("User:alice"), Resource.of_topic("secret"), Action.PUB) is Decision.DENY  # type: ignore[arg-type]
    before = (m.generation, m.get_acl("user:alice").to_info())  # type: ignore[union-attr]
    too_many = {"subject": "User:alice", "policies": [{"entries": [
        {"resource": "Topic:secret", "actions": ["Pub"], "decision": "Allow"}] + [
        {"resource": f"Topic:t{i}", "actions": ["Pub"], "decision": "Allow"} for i in range(9_999)]}]}
    with pytest.raises(AuthorizationError, match="too many"):
        m.put_acl(check_acl(parse_acl_info(too_many, None)))
    assert (m.generation, m.get_acl("User:alice").to_info()) == before  # type: ignore[union-attr]
    m.close()


def test_bodies_are_read_as_their_handlers_read_them_so_no_spelling_skips_the_check() -> None:
    acks = b'{"acks":[{"consumerGroup":"victim","topic":"vt","r":"0","so":0,"q":0,"rq":0,"pt":0,"it":0,"b":"AQ=="}]}'
    got = [c.resource.key for c in build_remoting_contexts(RequestCode.BATCH_ACK_MESSAGE, {}, acks, "c1")]
    assert got == ["Group:victim", "Topic:vt"]
    with pytest.raises(AuthorizationError, match="parse authorization context error."):
        build_remoting_contexts(RequestCode.BATCH_ACK_MESSAGE, {}, b'{"acks":[{"so":0}]}', "c1")
    heartbeat = b'{"consumerDataSet":[{"groupName":123,"subscriptionDataSet":[]}]}'
    assert [c.resource.key for c in build_remoting_contexts(RequestCode.HEART_BEAT, {}, heartbeat, "c1")] == [
        "Group:123"]
    pull = {"topic": "%RETRY%victim", "consumerGroup": "mine"}
    assert [c.resource.key for c in build_remoting_contexts(RequestCode.PULL_MESSAGE, pull, b"", "c1")] == [
        "Group:victim", "Group:mine"]
    send = {"a": "mine", "b": "%RETRY%victim"}
    assert [c.resource.key for c in build_remoting_contexts(RequestCode.SEND_MESSAGE_V2, send, b"", "c1")] == [
        "Group:victim"]


def test_an_ipv4_client_of_a_dual_stack_socket_is_its_ipv4_address_and_odd_text_is_refused_not_crashed() -> None:
    from sluice.auth.audit import AuditLog
    from sluice.auth.evaluator import Authenticator
    from sluice.auth.remoting_auth_pipeline import RemotingAuthPipeline, source_ip
    from sluice.remoting.command import RemotingCommand
    assert source_ip("::ffff:10.1.2.3:5555") == "10.1.2.3"
    assert source_ip("10.1.2.3:5555") == "10.1.2.3" and source_ip("::1:5555") == "::1"
    pipeline = RemotingAuthPipeline(Authenticator(AuthMetadataManager("/nonexistent/auth.json"), AuditLog()),
                                    None, "c1")
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "\ud800", "AccessKey": "x",
                                                                   "Signature": "y"})
    assert pipeline.refusal("127.0.0.1:1", request) == "User:x is not found."


def test_a_grpc_signature_is_fresh_within_a_day_wide_window_as_clients_stamp_local_time_marked_z() -> None:
    from sluice.auth.signature import grpc_date_time_age
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    assert grpc_date_time_age("20270115T080000Z", now) == 0  # a UTC client
    assert grpc_date_time_age("20270115T160000Z", now) == 0  # UTC+8 (its local time, marked Z)
    assert grpc_date_time_age("20270114T200000Z", now) == 0  # UTC-12
    assert grpc_date_time_age("20270115T230000Z", now) == 3600  # an hour past UTC+14
    assert grpc_date_time_age("20200101T000000Z", now) > 86_400
    assert grpc_date_time_age("yesterday", now) is None
