package sluice.interop;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONObject;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/** Thread-safe JSON-lines writer: one object per line, flushed at once so a test can follow progress. */
final class Journal implements AutoCloseable {
    private final OutputStream out;

    Journal(String path) throws IOException {
        this.out = new FileOutputStream(path, true);
    }

    Journal(PrintStream stream) {
        this.out = stream;
    }

    synchronized void write(JSONObject record) {
        try {
            out.write((JSON.toJSONString(record) + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    void event(String event, Object... keyValues) {
        JSONObject o = new JSONObject();
        o.put("event", event);
        for (int i = 0; i < keyValues.length; i += 2) {
            o.put((String) keyValues[i], keyValues[i + 1]);
        }
        write(o);
    }

    @Override
    public synchronized void close() throws IOException {
        out.flush();
        if (!(out instanceof PrintStream)) {
            out.close();
        }
    }

    /** What a client observes of a received message. */
    static JSONObject message(MessageExt m) {
        JSONObject o = new JSONObject();
        o.put("topic", m.getTopic());
        o.put("tags", m.getTags() == null ? "" : m.getTags());
        o.put("keys", m.getKeys() == null ? "" : m.getKeys());
        o.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        o.put("body_length", m.getBody().length);
        o.put("id", m.getMsgId());
        o.put("queue_id", m.getQueueId());
        o.put("queue_offset", m.getQueueOffset());
        o.put("commit_log_offset", m.getCommitLogOffset());
        o.put("reconsume_times", m.getReconsumeTimes());
        o.put("sys_flag", m.getSysFlag());
        o.put("body_crc", m.getBodyCRC());
        o.put("born_timestamp", m.getBornTimestamp());
        o.put("store_timestamp", m.getStoreTimestamp());
        o.put("born_host", String.valueOf(m.getBornHost()));
        o.put("store_host", String.valueOf(m.getStoreHost()));
        o.put("broker_name", m.getBrokerName());
        Map<String, String> props = m.getProperties() == null ? Map.of() : new TreeMap<>(m.getProperties());
        o.put("properties", props);
        return o;
    }

    static JSONObject queue(MessageQueue mq) {
        JSONObject o = new JSONObject();
        o.put("topic", mq.getTopic());
        o.put("broker", mq.getBrokerName());
        o.put("queue_id", mq.getQueueId());
        return o;
    }
}
