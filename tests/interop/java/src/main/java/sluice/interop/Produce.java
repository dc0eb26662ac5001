package sluice.interop;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * Sends {@code --count} messages with one send mode and writes each message with its result.
 *
 * <p>Message i has body {@code <mode>-<i>-grüße} (every {@code --big-every}-th one 6000 bytes, which the client
 * compresses), tag {@code TagA / TagB / TagC} in turn (or {@code --tags a,b}), keys
 * {@code <mode>-key-<i> <mode>-alt-<i>} and the user properties {@code seq, mode, note, shard}. {@code orderly}
 * sends through a {@code MessageQueueSelector} with shard {@code i % --keys} choosing queue
 * {@code shard % queues}; {@code async} keeps at most {@code --window} sends in flight; {@code batch} sends
 * {@code --batch-size} messages per {@code send(Collection)}. {@code --delay-level L} sets a delay level.
 * {@code --priorities 0,3,1} gives message i priority {@code priorities[i % n]} ({@code Message.setPriority},
 * RocketMQ 5.4's RIP-80). {@code --trace} turns the client's message trace on; with {@code --stop-file} the producer stays up after its
 * sends until the file appears (or {@code --timeout}). {@code --senders '[{"topic": T, "access_key": AK,
 * "secret_key": SK}, ...]'} (sync mode only) sends with one producer per entry in turn (credentials optional), each
 * one's records after a {@code sender} event with its index.
 */
final class Produce {
    private Produce() {
    }

    static int run(Args a) throws Exception {
        try (Journal out = new Journal(a.get("out"))) {
            String senders = a.get("senders", "");
            if (senders.isEmpty()) {
                produce(a, out, a.rpcHook(), a.get("topic"), "");
            } else {
                // Each sender a producer of its own (its own client instance, connections and credentials, or
                // none), one after the other: what as many processes would send, from one JVM.
                if (!a.get("mode").equals("sync") || !a.get("stop-file", "").isEmpty() || a.rpcHook() != null) {
                    throw new IllegalArgumentException("--senders goes with --mode sync, and without --stop-file or "
                        + "--access-key (each sender has its own)");
                }
                JSONArray list = JSON.parseArray(senders);
                for (int k = 0; k < list.size(); k++) {
                    JSONObject sender = list.getJSONObject(k);
                    out.event("sender", "index", k);
                    if (sender.containsKey("access_key") != sender.containsKey("secret_key")) {
                        throw new IllegalArgumentException("sender " + k + ": access_key and secret_key go together");
                    }
                    RPCHook hook = sender.containsKey("access_key") ? new AclClientRPCHook(
                        new SessionCredentials(sender.getString("access_key"), sender.getString("secret_key"))) : null;
                    produce(a, out, hook, sender.getString("topic"), "-" + k);
                }
            }
            out.event("end", "reason", "complete");
        }
        return 0;
    }

    private static void produce(Args a, Journal out, RPCHook hook, String topic, String instanceSuffix)
            throws Exception {
        String mode = a.get("mode");
        int count = a.getInt("count", 50);
        int batchSize = a.getInt("batch-size", 10);
        int keys = a.getInt("keys", 4);
        int bigEvery = a.getInt("big-every", 10);
        int window = a.getInt("window", 16);
        int delayLevel = a.getInt("delay-level", 0);
        String prefix = a.get("prefix", mode);
        String[] tags = a.get("tags", "TagA,TagB,TagC").split(",");
        String priorities = a.get("priorities", "");
        DefaultMQProducer producer = new DefaultMQProducer(a.get("group"), hook);
        producer.setNamesrvAddr(a.get("namesrv"));
        if (!a.get("namespace", "").isEmpty()) {  // (4.x namespaces: the client wraps names as ns%name)
            producer.setNamespace(a.get("namespace", ""));
        }
        producer.setUseTLS(a.flag("use-tls"));  // (TLS's test mode, the client's default: any certificate)
        producer.setMqClientApiTimeout(a.getInt("api-timeout-ms", 3000));  // (its name server and admin calls)
        producer.setSendMsgTimeout(a.getInt("send-timeout-ms", 10_000));
        producer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid() + instanceSuffix);
        producer.setEnableTrace(a.flag("trace"));  // (message trace to RMQ_SYS_TRACE_TOPIC)
        producer.start();
        try {
            send(producer, out, mode, topic, count, batchSize, keys, bigEvery, window, delayLevel, prefix, tags,
                priorities.isEmpty() ? new String[0] : priorities.split(","));
            if (!a.get("stop-file", "").isEmpty()) {  // a producer that lives on (its trace records leave later)
                out.event("sent-all");
                Waits.until(Waits.deadline(a), a.get("stop-file", ""), () -> false);
            }
        } finally {
            producer.shutdown();
        }
    }

    private static void send(DefaultMQProducer producer, Journal out, String mode, String topic, int count,
                             int batchSize, int keys, int bigEvery, int window, int delayLevel, String prefix,
                             String[] tags, String[] priorities) throws Exception {
        List<Message> pending = new ArrayList<>();
        List<JSONObject> pendingRecords = new ArrayList<>();
        Semaphore inFlight = new Semaphore(window);
        for (int i = 0; i < count; i++) {
            Message msg = new Message(topic, body(prefix, i, bigEvery).getBytes(StandardCharsets.UTF_8));
            msg.setTags(tags[i % tags.length]);
            msg.setKeys(prefix + "-key-" + i + " " + prefix + "-alt-" + i);
            msg.putUserProperty("seq", String.valueOf(i));
            msg.putUserProperty("mode", mode);
            msg.putUserProperty("note", "ünïcödé ok");
            msg.putUserProperty("shard", String.valueOf(i % keys));
            if (delayLevel > 0) {
                msg.setDelayTimeLevel(delayLevel);
            }
            if (priorities.length > 0) {
                msg.setPriority(Integer.parseInt(priorities[i % priorities.length]));
            }
            JSONObject record = record(msg);
            try {
                sendOne(producer, out, mode, msg, record, i, keys, pending, pendingRecords, batchSize, count,
                    inFlight);
            } catch (MQClientException | MQBrokerException e) {
                int code = e instanceof MQClientException ? ((MQClientException) e).getResponseCode()
                    : ((MQBrokerException) e).getResponseCode();
                record.put("event", "send-failed");
                record.put("code", code);
                record.put("error", String.valueOf(e.getMessage()).split("\n")[0]);
                if (e.getCause() != null) {
                    record.put("cause", String.valueOf(e.getCause().getMessage()).split("\n")[0]);
                }
                out.write(record);
                pending.clear();
                pendingRecords.clear();
            }
        }
        if (!inFlight.tryAcquire(window, 60, TimeUnit.SECONDS)) {
            out.event("send-unanswered", "in_flight", window - inFlight.availablePermits());
        }
    }

    private static void sendOne(DefaultMQProducer producer, Journal out, String mode, Message msg, JSONObject record,
                                int i, int keys, List<Message> pending, List<JSONObject> pendingRecords,
                                int batchSize, int count, Semaphore inFlight) throws Exception {
        switch (mode) {
            case "sync":
                written(out, record, producer.send(msg));
                break;
            case "orderly":
                int shard = i % keys;
                written(out, record, producer.send(msg, (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()),
                    shard));
                break;
            case "oneway":
                producer.sendOneway(msg);
                record.put("event", "sent");
                record.put("status", "ONEWAY");
                out.write(record);
                break;
            case "async":
                inFlight.acquire();
                producer.send(msg, new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        written(out, record, r);
                        inFlight.release();
                    }

                    @Override
                    public void onException(Throwable e) {
                        record.put("event", "send-failed");
                        record.put("error", String.valueOf(e));
                        out.write(record);
                        inFlight.release();
                    }
                });
                break;
            case "batch":
                pending.add(msg);
                pendingRecords.add(record);
                if (pending.size() == batchSize || i == count - 1) {
                    SendResult r = producer.send(pending);
                    String[] ids = r.getMsgId().split(",");
                    for (int k = 0; k < pendingRecords.size(); k++) {
                        JSONObject rec = pendingRecords.get(k);
                        fill(rec, r);
                        rec.put("msg_id", ids[k]);
                        rec.put("queue_offset", r.getQueueOffset() + k);
                        out.write(rec);
                    }
                    pending.clear();
                    pendingRecords.clear();
                }
                break;
            default:
                throw new IllegalArgumentException("unknown --mode " + mode);
        }
    }

    static String body(String prefix, int i, int bigEvery) {
        String body = prefix + "-" + i + "-grüße";
        if (bigEvery > 0 && i % bigEvery == bigEvery - 1) {
            StringBuilder b = new StringBuilder(body).append('-');
            while (b.toString().getBytes(StandardCharsets.UTF_8).length < 6000) {
                b.append('x');
            }
            body = b.toString();
        }
        return body;
    }

    private static JSONObject record(Message msg) {
        JSONObject o = new JSONObject();
        o.put("event", "sent");
        o.put("body", new String(msg.getBody(), StandardCharsets.UTF_8));
        o.put("tags", msg.getTags());
        o.put("keys", msg.getKeys());
        TreeMap<String, String> props = new TreeMap<>();
        for (String k : new String[] {"seq", "mode", "note", "shard"}) {
            props.put(k, msg.getUserProperty(k));
        }
        o.put("properties", props);
        return o;
    }

    private static void written(Journal out, JSONObject record, SendResult r) {
        fill(record, r);
        out.write(record);
    }

    private static void fill(JSONObject record, SendResult r) {
        record.put("status", r.getSendStatus().name());
        record.put("msg_id", r.getMsgId());
        record.put("offset_msg_id", r.getOffsetMsgId());
        MessageQueue mq = r.getMessageQueue();
        record.put("broker", mq.getBrokerName());
        record.put("queue_id", mq.getQueueId());
        record.put("queue_offset", r.getQueueOffset());
    }
}
