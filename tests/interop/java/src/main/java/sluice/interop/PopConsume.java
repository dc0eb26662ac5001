package sluice.interop;

import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A {@code DefaultMQPushConsumer} that pops (RocketMQ 5): client rebalance off, so it asks a broker which queues
 * are its own (QUERY_ASSIGNMENT) and pops those whose mode is POP, acking each consumed message (ACK_MESSAGE) and
 * changing the invisible time of each one it fails (CHANGE_MESSAGE_INVISIBLETIME). Writes every delivery ("received",
 * or "failed" when answered RECONSUME_LATER, with the receipt as {@code pop_ck}); ends when {@code --expect}
 * distinct bodies were consumed (plus {@code --linger} seconds), when {@code --stop-file} appears, or at
 * {@code --timeout}.
 *
 * <p>{@code --fail-once-suffix S} answers RECONSUME_LATER the first time it sees a message whose body ends with S;
 * every later delivery of it is consumed.
 */
final class PopConsume {
    private PopConsume() {
    }

    static int run(Args a) throws Exception {
        long deadline = Waits.deadline(a);
        int expect = a.getInt("expect", 0);
        String failOnce = a.get("fail-once-suffix", "");
        Set<String> failed = ConcurrentHashMap.newKeySet();
        Set<String> bodies = ConcurrentHashMap.newKeySet();
        try (Journal out = new Journal(a.get("out"))) {
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(a.get("group"));
            consumer.setNamesrvAddr(a.get("namesrv"));
            consumer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid());
            consumer.setPollNameServerInterval(a.getInt("poll-namesrv-ms", 1000));
            consumer.setHeartbeatBrokerInterval(a.getInt("heartbeat-ms", 1000));
            consumer.setClientRebalance(false);
            consumer.subscribe(a.get("topic"), a.get("expression", "*"));
            consumer.setConsumeFromWhere(ConsumeFromWhere.valueOf(a.get("consume-from",
                "CONSUME_FROM_LAST_OFFSET")));
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                boolean ok = true;
                for (MessageExt m : msgs) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    if (!failOnce.isEmpty() && body.endsWith(failOnce) && failed.add(body)) {
                        ok = false;
                    }
                }
                write(out, msgs, ok);
                if (!ok) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                for (MessageExt m : msgs) {
                    bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            out.event("started", "client_id", consumer.buildMQClientId());
            String reason = Waits.until(deadline, a.get("stop-file", ""), () -> expect > 0 && bodies.size() >= expect);
            if (reason.equals("complete") && a.getDouble("linger", 0) > 0) {
                long lingerEnd = Math.min(deadline, System.nanoTime() + (long) (a.getDouble("linger", 0) * 1e9));
                Waits.until(lingerEnd, a.get("stop-file", ""), () -> false);
            }
            consumer.shutdown();
            out.event("end", "reason", reason);
        }
        return 0;
    }

    private static void write(Journal out, List<MessageExt> msgs, boolean ok) {
        for (MessageExt m : msgs) {
            JSONObject rec = Journal.message(m);
            rec.put("event", ok ? "received" : "failed");
            rec.put("pop_ck", m.getProperty(MessageConst.PROPERTY_POP_CK));
            rec.put("thread", Thread.currentThread().getName());
            out.write(rec);
        }
    }
}
