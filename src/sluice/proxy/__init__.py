"""The gRPC front (RocketMQ 5 clients): ``sluice proxy``."""
