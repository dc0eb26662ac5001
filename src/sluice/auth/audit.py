"""The audit log: one line per authentication or authorization decision, in RocketMQ's words, to a logger of its own
(``sluice.auth.audit``: route it to a file or elsewhere with the logging configuration). As in RocketMQ, refusals
are INFO and successes DEBUG. Refusals are rate-limited — a flood of forged requests cannot fill the disk — and
what was left out is counted in the next line that is written."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence

from sluice.auth.model import Action, Resource

log = logging.getLogger("sluice.auth.audit")

# Control characters (line breaks above all) in what a client sent: escaped, so that a user name cannot write a
# line of its own into the log.
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def _printable(text: object) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", str(text))


class AuditLog:
    def __init__(self, refusals_per_second: float = 100.0, burst: int = 1000,
                 logger: logging.Logger | None = None) -> None:
        self.log = logger or log
        self.rate = refusals_per_second
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self.suppressed = 0
        self.refusals = 0  # (counted, written or not)

    def _may_write(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.suppressed += 1
        return False

    def _refusal(self, line: str) -> None:
        line = _printable(line)
        self.refusals += 1
        if not self.log.isEnabledFor(logging.INFO) or not self._may_write():
            return
        if self.suppressed:
            line += f" ({self.suppressed} refusals before this one were not logged: rate limit)"
            self.suppressed = 0
        self.log.info(line)

    def authentication(self, username: str | None, signature: str | None, ok: bool) -> None:
        if not username:
            return
        if ok:
            if self.log.isEnabledFor(logging.DEBUG):
                self.log.debug("[AUTHENTICATION] User:%s is authenticated success with Signature = %s.",
                               _printable(username), _printable(signature))
        else:
            self._refusal(f"[AUTHENTICATION] User:{username} is authenticated failed with Signature = {signature}.")

    def authorization(self, subject: str, ok: bool, actions: Sequence[Action], source_ip: str,
                      resource: Resource, rpc_code: str) -> None:
        if ok and not self.log.isEnabledFor(logging.DEBUG):
            return
        what = ",".join(a.label for a in actions)
        if ok:
            if self.log.isEnabledFor(logging.DEBUG):
                self.log.debug("[AUTHORIZATION] Subject = %s is Allow Action = %s from sourceIp = %s on resource = %s "
                               "for request = %s.", _printable(subject), what, source_ip, _printable(resource.key),
                               rpc_code)
        else:
            self._refusal(f"[AUTHORIZATION] Subject = {subject} is Deny Action = {what} from sourceIp = {source_ip} "
                          f"on resource = {resource.key} for request = {rpc_code}.")
