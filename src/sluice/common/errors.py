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
