"""Authentication, then authorization, of every remoting request a broker serves (RocketMQ's broker
``AuthenticationPipeline`` and ``AuthorizationPipeline``): a refusal is NO_PERMISSION with RocketMQ's remark, and
the request goes no further."""

from __future__ import annotations

import functools
import ipaddress
import logging

from sluice.auth.authorization_context_builder import build_remoting_contexts
from sluice.auth.evaluator import Authenticator, Authorizer
from sluice.auth.model import AuthenticationError, AuthorizationError
from sluice.auth.signature import ACCESS_KEY, SIGNATURE, remoting_content
from sluice.remoting.command import RemotingCommand

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=4096)
def source_ip(remote_addr: str) -> str:
    """``"10.0.0.5:51234"`` → ``"10.0.0.5"`` (RocketMQ: the text before the last colon); an IPv4 client of a
    dual-stack socket (``::ffff:10.0.0.5``) as its IPv4 address, which rules name."""
    host = (remote_addr.rpartition(":")[0] if ":" in remote_addr else remote_addr).strip("[]")
    try:
        mapped = ipaddress.IPv6Address(host).ipv4_mapped
    except ValueError:
        return host
    return str(mapped) if mapped is not None else host


class RemotingAuthPipeline:
    def __init__(self, authenticator: Authenticator | None, authorizer: Authorizer | None, cluster_name: str) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.cluster_name = cluster_name

    def refusal(self, remote_addr: str, request: RemotingCommand) -> str | None:
        """None when ``request`` may be served; else why not (the remark of the NO_PERMISSION answer)."""
        ext = request.ext_fields
        rpc_code = str(request.code)
        username = ext.get(ACCESS_KEY)
        try:
            if self.authenticator is not None:
                content = remoting_content(ext, request.body, request.version)
                self.authenticator.authenticate(username, ext.get(SIGNATURE), content, rpc_code)
            if self.authorizer is not None:
                contexts = build_remoting_contexts(request.code, ext, request.body, self.cluster_name)
                self.authorizer.authorize(username, contexts, source_ip(remote_addr), rpc_code)
        except (AuthenticationError, AuthorizationError) as exc:
            return str(exc)
        except Exception:  # a request no check foresaw: refused, never served
            log.warning("refusing request %d from %s: it could not be checked", request.code, remote_addr,
                        exc_info=True)
            return "Authentication failed. Please verify the credentials and try again."
        return None
