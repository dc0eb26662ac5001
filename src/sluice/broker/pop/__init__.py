"""POP consumption (RocketMQ 5): POP_MESSAGE, ACK_MESSAGE / BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME,
their long polling, and the revive service that brings back what was popped and never acknowledged."""
