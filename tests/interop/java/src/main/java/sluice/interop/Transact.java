package sluice.interop;

import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A {@code TransactionMQProducer} sending {@code --count} transactional messages; message i's body names what its
 * local transaction decides: {@code commit-i}, {@code rollback-i}, {@code check-commit-i} and
 * {@code check-rollback-i} (UNKNOWN at first, decided when the broker checks back), {@code throw-i} (the local
 * transaction throws; checked back, then COMMIT).
 *
 * <p>Writes {@code sent} (body, status, local state, ids, queue offset) and {@code checked} (body, how often) and
 * waits for {@code --stop-file} or {@code --timeout}: the answers to checks go out one-way after the listener
 * returns, so the test says when it has seen their effect.
 */
final class Transact {
    private Transact() {
    }

    static int run(Args a) throws Exception {
        long deadline = Waits.deadline(a);
        int count = a.getInt("count", 10);
        String topic = a.get("topic");
        String[] kinds = a.get("kinds", "commit,rollback,check-commit,check-rollback,throw").split(",");
        Map<String, AtomicInteger> checks = new ConcurrentHashMap<>();
        try (Journal out = new Journal(a.get("out"))) {
            TransactionMQProducer producer = new TransactionMQProducer(a.get("group"));
            producer.setNamesrvAddr(a.get("namesrv"));
            producer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid());
            producer.setHeartbeatBrokerInterval(a.getInt("heartbeat-ms", 1000));
            producer.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                    if (body.startsWith("commit-")) {
                        return LocalTransactionState.COMMIT_MESSAGE;
                    }
                    if (body.startsWith("rollback-")) {
                        return LocalTransactionState.ROLLBACK_MESSAGE;
                    }
                    if (body.startsWith("throw-")) {
                        throw new IllegalStateException("the local transaction failed");
                    }
                    return LocalTransactionState.UNKNOW;
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                    int n = checks.computeIfAbsent(body, k -> new AtomicInteger()).incrementAndGet();
                    out.event("checked", "body", body, "times", n, "topic", msg.getTopic(),
                        "transaction_id", String.valueOf(msg.getTransactionId()));
                    return body.startsWith("check-rollback-") ? LocalTransactionState.ROLLBACK_MESSAGE
                        : LocalTransactionState.COMMIT_MESSAGE;
                }
            });
            producer.start();
            try {
                for (int i = 0; i < count; i++) {
                    String body = kinds[i % kinds.length] + "-" + i;
                    Message msg = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
                    msg.setTags("Tx");
                    msg.setKeys("tx-key-" + i);
                    msg.putUserProperty("seq", String.valueOf(i));
                    TransactionSendResult r = producer.sendMessageInTransaction(msg, null);
                    JSONObject o = new JSONObject();
                    o.put("event", "sent");
                    o.put("body", body);
                    o.put("status", String.valueOf(r.getSendStatus()));
                    o.put("local_state", String.valueOf(r.getLocalTransactionState()));
                    o.put("msg_id", r.getMsgId());
                    o.put("offset_msg_id", r.getOffsetMsgId());
                    o.put("transaction_id", r.getTransactionId());
                    o.put("queue_offset", r.getQueueOffset());
                    out.write(o);
                }
                String reason = Waits.until(deadline, a.get("stop-file", ""), () -> false);
                out.event("end", "reason", reason);
            } finally {
                producer.shutdown();
            }
        }
        return 0;
    }
}
