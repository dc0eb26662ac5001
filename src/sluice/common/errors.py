"""Every exception Sluice raises, in one place."""


class SluiceError(Exception):
    """Base class of Sluice's errors."""


class InvalidNameError(SluiceError, ValueError):
    """A topic or group name breaks RocketMQ's naming rules."""


class MessageFormatError(SluiceError, ValueError):
    """Bytes that should hold a message record do not."""


class StoreError(SluiceError):
    """The message store cannot do what was asked."""


class StoreConfigError(StoreError):
    """A store file (config JSON, checkpoint) is corrupt; the store refuses to open rather than reset."""


class StoreLockedError(StoreError):
    """Another process holds the store directory."""


class InvalidSubscriptionError(SluiceError, ValueError):
    """A subscription (tag) expression cannot be parsed, e.g. ``"a ||"`` or a tag containing ``|``."""


class FilterExpressionError(InvalidSubscriptionError):
    """A filter expression (SQL92, or a ``key=value`` filter) cannot be compiled.

    ``reason`` says why, ``position`` where (0-based index into ``expression``; ``line`` and ``column`` count from 1).
    """

    def __init__(self, reason: str, expression: str, position: int) -> None:
        self.reason = reason
        self.expression = expression
        self.position = max(0, min(position, len(expression)))
        before = expression[:self.position]
        self.line = before.count("\n") + 1
        self.column = self.position - (before.rfind("\n") + 1) + 1
        text = expression.split("\n")[self.line - 1] if expression else ""
        where = f"line {self.line}, column {self.column}" if "\n" in expression else f"column {self.column}"
        super().__init__(f"{reason} (at {where})\n  {text}\n  {' ' * (self.column - 1)}^")


class OffsetStoreError(SluiceError):
    """A consumer's local offset file is unreadable or corrupt; the consumer refuses to start from a guess."""


class ClientError(SluiceError):
    """A client call failed: no route, client not started, every retry failed."""


class NameServerUnavailableError(ClientError):
    """No name server answered (every address refused, timed out or is backing off)."""


class BrokerResponseError(ClientError):
    """A broker or name server answered with an error code; ``code`` and ``remark`` say which."""

    def __init__(self, code: int, remark: str | None, addr: str = "") -> None:
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        where = f" from {addr}" if addr else ""
        super().__init__(f"error {code}{where}: {self.remark or 'no remark'}")
