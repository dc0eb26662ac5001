"""Flag bits from RocketMQ's MessageSysFlag, PermName and the stored-record magic codes."""

from typing import Final

# MessageSysFlag: the sysFlag bits of a message
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
TRANSACTION_TYPE_MASK: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOST_V6_FLAG: Final = 0x20

# Stored record magic codes: a message record, or the BLANK filler that closes a commit-log file
MESSAGE_MAGIC_CODE_V1: Final = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194

# PermName: a topic's or broker's permission bits
PERM_PRIORITY: Final = 0x8
PERM_READ: Final = 0x4
PERM_WRITE: Final = 0x2
PERM_INHERIT: Final = 0x1


def transaction_type(sys_flag: int) -> int:
    """The transaction type bits of a sys flag (NOT, PREPARED, COMMIT or ROLLBACK)."""
    return sys_flag & TRANSACTION_TYPE_MASK
