package sluice.interop;

import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;

/**
 * A {@code DefaultMQPushConsumer}: subscribes, writes every delivery, ends when {@code --expect} distinct bodies
 * were consumed (plus {@code --linger} seconds), when {@code --stop-file} appears, or at {@code --timeout}.
 *
 * <p>{@code --reconsume-later N} answers RECONSUME_LATER (orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT) while a
 * message's reconsume times are below N; {@code --reconsume-later always} never consumes, so messages go to the
 * dead-letter queue after {@code --max-reconsume-times}. Deliveries answered that way are "failed" lines.
 *
 * <p>{@code --sql EXPR} subscribes with {@code MessageSelector.bySql(EXPR)} instead of {@code --expression}; a
 * start the broker refuses (its CHECK_CLIENT_CONFIG answer) is a "start-failed" line with the code and message.
 *
 * <p>Routes are refreshed every {@code --poll-namesrv-ms} (default 1 s, not 30 s) so that a retry topic the
 * broker creates at the first heartbeat is read soon; each new allocation of queues is an "allocated" line.
 */
final class PushConsume {
    private PushConsume() {
    }

    static int run(Args a) throws Exception {
        long deadline = Waits.deadline(a);
        int expect = a.getInt("expect", 0);
        String later = a.get("reconsume-later", "0");
        int failBelow = later.equals("always") ? Integer.MAX_VALUE : Integer.parseInt(later);
        Set<String> bodies = ConcurrentHashMap.newKeySet();
        try (Journal out = new Journal(a.get("out"))) {
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(a.get("group"), a.rpcHook());
            consumer.setNamesrvAddr(a.get("namesrv"));
            if (!a.get("namespace", "").isEmpty()) {  // (4.x namespaces: the client wraps names as ns%name)
                consumer.setNamespace(a.get("namespace", ""));
            }
            consumer.setUseTLS(a.flag("use-tls"));  // (TLS's test mode, the client's default: any certificate)
            consumer.setMqClientApiTimeout(a.getInt("api-timeout-ms", 3000));  // (its name server and admin calls)
            consumer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid());
            consumer.setPollNameServerInterval(a.getInt("poll-namesrv-ms", 1000));
            consumer.setEnableTrace(a.flag("trace"));  // (message trace to RMQ_SYS_TRACE_TOPIC)
            // The heartbeat a rebalance sends is skipped while another holds the client's heartbeat lock (the
            // first one, at start, usually); until the next one the broker answers pulls SUBSCRIPTION_NOT_LATEST.
            consumer.setHeartbeatBrokerInterval(a.getInt("heartbeat-ms", 1000));
            String sql = a.get("sql", "");
            if (sql.isEmpty()) {
                consumer.subscribe(a.get("topic"), a.get("expression", "*"));
            } else {
                consumer.subscribe(a.get("topic"), MessageSelector.bySql(sql));
            }
            if (a.get("model", "clustering").equals("broadcasting")) {
                consumer.setMessageModel(MessageModel.BROADCASTING);
            }
            consumer.setConsumeFromWhere(ConsumeFromWhere.valueOf(a.get("consume-from",
                "CONSUME_FROM_LAST_OFFSET")));
            if (a.getInt("max-reconsume-times", -2) != -2) {
                consumer.setMaxReconsumeTimes(a.getInt("max-reconsume-times", 16));
            }
            if (a.getInt("threads", 0) > 0) {
                consumer.setConsumeThreadMin(a.getInt("threads", 0));
                consumer.setConsumeThreadMax(a.getInt("threads", 0));
            }
            if (a.getInt("batch", 0) > 0) {
                consumer.setConsumeMessageBatchMaxSize(a.getInt("batch", 1));
            }
            consumer.setAllocateMessageQueueStrategy(new ReportingAllocation(out));
            if (a.flag("orderly")) {
                consumer.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                    if (!deliver(out, msgs, failBelow, bodies)) {
                        ctx.setSuspendCurrentQueueTimeMillis(100);
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                });
            } else {
                consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
                    deliver(out, msgs, failBelow, bodies) ? ConsumeConcurrentlyStatus.CONSUME_SUCCESS
                        : ConsumeConcurrentlyStatus.RECONSUME_LATER);
            }
            try {
                consumer.start();
            } catch (MQClientException e) {  // a broker refusing the filter (CHECK_CLIENT_CONFIG) stops the start
                out.event("start-failed", "code", e.getResponseCode(), "message", String.valueOf(e.getErrorMessage()));
                return 0;
            }
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

    /** Writes the deliveries; false when they are to be reconsumed later. */
    private static boolean deliver(Journal out, List<MessageExt> msgs, int failBelow, Set<String> bodies) {
        boolean ok = true;
        for (MessageExt m : msgs) {
            if (m.getReconsumeTimes() < failBelow) {
                ok = false;
            }
        }
        for (MessageExt m : msgs) {
            JSONObject rec = Journal.message(m);
            rec.put("event", ok ? "received" : "failed");
            rec.put("thread", Thread.currentThread().getName());
            out.write(rec);
            if (ok) {
                bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
        }
        return ok;
    }

    /** RocketMQ's default allocation, reporting each new outcome per topic ("allocated": queue ids, members). */
    private static final class ReportingAllocation implements AllocateMessageQueueStrategy {
        private final AllocateMessageQueueAveragely inner = new AllocateMessageQueueAveragely();
        private final Journal out;
        private final Map<String, List<Integer>> last = new ConcurrentHashMap<>();

        ReportingAllocation(Journal out) {
            this.out = out;
        }

        @Override
        public List<MessageQueue> allocate(String group, String clientId, List<MessageQueue> all,
                                           List<String> clientIds) {
            List<MessageQueue> mine = inner.allocate(group, clientId, all, clientIds);
            if (!all.isEmpty()) {
                String topic = all.get(0).getTopic();
                List<Integer> ids = new ArrayList<>();
                for (MessageQueue mq : mine) {
                    ids.add(mq.getQueueId());
                }
                ids.sort(null);
                if (!ids.equals(last.put(topic, ids))) {
                    out.event("allocated", "topic", topic, "queue_ids", ids, "members", clientIds.size());
                }
            }
            return mine;
        }

        @Override
        public String getName() {
            return inner.getName();
        }
    }
}
