"""ACL 2.0 (RocketMQ 5.3+): users, rules, request signatures, and the check of every request (docs/security.md).

Sans-IO apart from ``auth_metadata_manager`` (its file). The client needs only ``credentials`` and ``signature``.
"""
