"""The name server's check (beyond RocketMQ, whose name server has none): with authentication on, a request that
changes what it knows — a broker's registration, KV config, a topic's deletion, write permissions — must be signed
with the inner client credentials, which only Sluice's own components (and operators given them) hold. Route and
cluster queries stay open to anyone, as in RocketMQ."""

from __future__ import annotations

import hmac

from sluice.auth.audit import AuditLog
from sluice.auth.signature import ACCESS_KEY, SIGNATURE, remoting_content, signature_matches
from sluice.remoting.codes import RequestCode
from sluice.remoting.command import RemotingCommand

NAMESRV_WRITES = frozenset({
    RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG, RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER, RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.UPDATE_NAMESRV_CONFIG,
    RequestCode.QUERY_DATA_VERSION,  # (it keeps a broker alive in the routes)
    217, 904,  # REGISTER_TOPIC_IN_NAMESRV, BROKER_HEARTBEAT
})


class InnerCredentialsCheck:
    def __init__(self, access_key: str, secret_key: str, audit: AuditLog | None = None) -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.audit = audit or AuditLog()

    def refusal(self, remote_addr: str, request: RemotingCommand) -> str | None:
        if request.code not in NAMESRV_WRITES:
            return None
        ext = request.ext_fields
        username = ext.get(ACCESS_KEY)
        if not username:
            return "username cannot be null."
        signature = ext.get(SIGNATURE)
        if not hmac.compare_digest(username.encode("utf-8", "replace"), self.access_key.encode("utf-8")):
            self.audit.authentication(username, signature, False)
            return f"User:{username} is not found."
        if not signature_matches(self.secret_key, remoting_content(ext, request.body, request.version), signature):
            self.audit.authentication(username, signature, False)
            return "check signature failed."
        return None
