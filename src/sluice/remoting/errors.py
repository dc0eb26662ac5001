"""Errors of the remoting layer."""

from sluice.common.errors import SluiceError


class ProtocolError(SluiceError):
    """Bytes on a connection that are not a valid remoting frame: the connection must be closed."""


class FrameTooLargeError(ProtocolError):
    """A frame longer than the configured limit (16 MiB by default)."""
