package sluice.interop;

import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A {@code DefaultLitePullConsumer}, auto-commit off: {@code subscribe} (rebalanced) or {@code --assign} (every
 * queue of the topic, paused until every {@code --seek qid:offset,...} is made), polls until {@code --expect}
 * distinct bodies arrived (or {@code --timeout} / {@code --stop-file}), commits with {@code commitSync()} unless {@code --no-commit},
 * and writes the offsets {@code committed(mq)} then reports for every queue. {@code --sql EXPR} subscribes with
 * {@code MessageSelector.bySql(EXPR)}; a start the broker refuses is a "start-failed" line.
 */
final class LitePull {
    private LitePull() {
    }

    static int run(Args a) throws Exception {
        long deadline = Waits.deadline(a);
        int expect = a.getInt("expect", 0);
        String topic = a.get("topic");
        Set<String> bodies = ConcurrentHashMap.newKeySet();
        try (Journal out = new Journal(a.get("out"))) {
            DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(a.get("group"));
            consumer.setNamesrvAddr(a.get("namesrv"));
            consumer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid());
            consumer.setAutoCommit(false);
            consumer.setPollNameServerInterval(a.getInt("poll-namesrv-ms", 1000));
            consumer.setPollTimeoutMillis(200);
            consumer.setConsumeFromWhere(ConsumeFromWhere.valueOf(a.get("consume-from",
                "CONSUME_FROM_FIRST_OFFSET")));
            boolean assign = a.flag("assign");
            String sql = a.get("sql", "");
            if (!assign && sql.isEmpty()) {
                consumer.subscribe(topic, a.get("expression", "*"));
            } else if (!assign) {
                consumer.subscribe(topic, MessageSelector.bySql(sql));
            }
            List<MessageQueue> queues = assign ? routeQueues(a, topic) : null;
            if (assign) {
                // Paused from before the start until every seek is made: a pull in flight across seek() can land
                // its old-offset messages after the new task took the seek offset (the client's own race).
                consumer.assign(queues);
                consumer.pause(queues);
            }
            try {
                consumer.start();
            } catch (MQClientException e) {  // a broker refusing the filter (CHECK_CLIENT_CONFIG) stops the start
                out.event("start-failed", "code", e.getResponseCode(), "message", String.valueOf(e.getErrorMessage()));
                return 0;
            }
            if (!assign) {
                queues = new ArrayList<>(consumer.fetchMessageQueues(topic));
                queues.sort(null);
            } else {
                for (String seek : a.get("seek", "").split(",")) {
                    if (seek.isEmpty()) {
                        continue;
                    }
                    String[] qo = seek.split(":");
                    for (MessageQueue mq : queues) {
                        if (mq.getQueueId() == Integer.parseInt(qo[0])) {
                            consumer.seek(mq, Long.parseLong(qo[1]));
                        }
                    }
                }
                consumer.resume(queues);
            }
            out.event("started", "queues", queues.size());
            String reason;
            while (true) {
                for (MessageExt m : consumer.poll(200)) {
                    JSONObject rec = Journal.message(m);
                    rec.put("event", "received");
                    out.write(rec);
                    bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
                }
                reason = Waits.until(System.nanoTime(), a.get("stop-file", ""),
                    () -> expect > 0 && bodies.size() >= expect);
                if (!reason.equals("timeout") || System.nanoTime() >= deadline) {
                    break;
                }
            }
            if (!a.flag("no-commit")) {
                consumer.commitSync();
            }
            out.write(committed(consumer, queues));
            consumer.shutdown();
            out.event("end", "reason", reason);
        }
        return 0;
    }

    /** The topic's queues, read by a short-lived consumer of its own: the assigning one is not started yet. */
    private static List<MessageQueue> routeQueues(Args a, String topic) throws MQClientException {
        DefaultLitePullConsumer probe = new DefaultLitePullConsumer(a.get("group") + "-route-probe");
        probe.setNamesrvAddr(a.get("namesrv"));
        probe.setInstanceName("sluice-interop-probe-" + ProcessHandle.current().pid());
        probe.start();
        try {
            List<MessageQueue> queues = new ArrayList<>(probe.fetchMessageQueues(topic));
            queues.sort(null);
            return queues;
        } finally {
            probe.shutdown();
        }
    }

    private static JSONObject committed(DefaultLitePullConsumer consumer, Collection<MessageQueue> queues)
        throws Exception {
        TreeMap<String, Long> offsets = new TreeMap<>();  // string keys: fastjson writes number keys bare
        for (MessageQueue mq : queues) {
            offsets.put(String.valueOf(mq.getQueueId()), consumer.committed(mq));
        }
        JSONObject o = new JSONObject();
        o.put("event", "committed");
        o.put("offsets", offsets);
        return o;
    }
}
