"""The README's produce / consume example works against a real name server and broker."""

import threading

from sluice import ConsumeStatus, Message, Producer, PushConsumer


def test_readme_example_produces_and_consumes(cluster):
    got: list[bytes] = []
    done = threading.Event()

    with Producer("quickstart-producers", namesrv=cluster.namesrv_addr) as producer:
        result = producer.send(Message("orders", b"order-1", tags="paid", keys=["o-1"]))
        assert result.status.name == "SEND_OK" and result.queue.topic == "orders"

        consumer = PushConsumer("billing", namesrv=cluster.namesrv_addr, consume_from="first")
        consumer.subscribe("orders", "paid || refunded")

        @consumer.listener
        def handle(msgs):
            got.extend(m.body for m in msgs)
            if len(got) >= 2:
                done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.start()
        try:
            producer.send(Message("orders", b"order-2", tags="refunded"))
            producer.send(Message("orders", b"ignored", tags="created"))
            assert done.wait(15)
        finally:
            consumer.shutdown()
    assert sorted(got) == [b"order-1", b"order-2"]
