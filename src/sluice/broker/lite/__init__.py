"""Lite topics (RocketMQ 5.5): who reads which lite topic, which reader looks at which next, and when an idle
lite topic goes (sluice.common.lite holds their names)."""
