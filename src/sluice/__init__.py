"""Sluice: a RocketMQ-compatible message queue in Python."""

__version__ = "0.1.0"
