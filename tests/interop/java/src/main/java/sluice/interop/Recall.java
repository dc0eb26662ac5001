package sluice.interop;

import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * Recall (RocketMQ 5.x's {@code DefaultMQProducer.recallMessage}): sends two timer messages {@code java-recall-me}
 * and {@code java-keep-me} to {@code --topic}, due in {@code --delay-ms}, and recalls the first with the handle its
 * send returned ({@code sent} and {@code recalled} records). With {@code --recall-handle H} it recalls that handle
 * too (another client's), and writes {@code recalled-other} or {@code error}.
 */
final class Recall {
    private Recall() {
    }

    static int run(Args a) throws Exception {
        try (Journal out = new Journal(a.get("out"))) {
            DefaultMQProducer producer = new DefaultMQProducer(a.get("group"));
            producer.setNamesrvAddr(a.get("namesrv"));
            producer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid());
            producer.start();
            try {
                String topic = a.get("topic");
                long delay = a.getInt("delay-ms", 5000);
                String handle = null;
                for (String body : new String[] {"java-recall-me", "java-keep-me"}) {
                    Message msg = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
                    msg.setDelayTimeMs(delay);
                    SendResult result = producer.send(msg);
                    out.event("sent", "body", body, "msg_id", result.getMsgId(), "recall_handle",
                        String.valueOf(result.getRecallHandle()));
                    if (handle == null) {
                        handle = result.getRecallHandle();
                    }
                }
                out.event("recalled", "msg_id", producer.recallMessage(topic, handle));
                String other = a.get("recall-handle", "");
                if (!other.isEmpty()) {
                    JSONObject r = new JSONObject();
                    try {
                        r.put("msg_id", producer.recallMessage(topic, other));
                        r.put("event", "recalled-other");
                    } catch (Exception e) {
                        r.put("event", "error");
                        r.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                    }
                    out.write(r);
                }
            } finally {
                producer.shutdown();
            }
            out.event("end", "reason", "complete");
        }
        return 0;
    }
}
