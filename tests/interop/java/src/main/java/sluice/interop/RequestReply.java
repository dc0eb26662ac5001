package sluice.interop;

import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Request-reply (RocketMQ 4.6's {@code DefaultMQProducer.request} and {@code MessageUtil.createReplyMessage}).
 *
 * <p>{@code --role request}: sends {@code --count} requests {@code ping <i>} to {@code --topic}, one after another,
 * each waiting {@code --request-timeout-ms} for its reply; writes {@code reply} (body, topic, correlation id, reply
 * properties) or {@code error} per request.
 * {@code --role respond}: a push consumer of {@code --topic} that answers every request with its body in upper case
 * ({@code replied} per answer) until {@code --stop-file} appears or {@code --timeout}.
 */
final class RequestReply {
    private RequestReply() {
    }

    static int run(Args a) throws Exception {
        try (Journal out = new Journal(a.get("out"))) {
            if ("respond".equals(a.get("role"))) {
                respond(a, out);
            } else {
                request(a, out);
            }
            out.event("end", "reason", "complete");
        }
        return 0;
    }

    private static void request(Args a, Journal out) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(a.get("group"));
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid());
        producer.start();
        try {
            int count = a.getInt("count", 3);
            long timeout = a.getInt("request-timeout-ms", 10_000);
            for (int i = 0; i < count; i++) {
                Message msg = new Message(a.get("topic"), ("ping " + i).getBytes(StandardCharsets.UTF_8));
                JSONObject r = new JSONObject();
                r.put("seq", i);
                try {
                    Message reply = producer.request(msg, timeout);
                    r.put("event", "reply");
                    r.put("body", new String(reply.getBody(), StandardCharsets.UTF_8));
                    r.put("topic", reply.getTopic());
                    r.put("correlation_id", reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
                    r.put("msg_type", reply.getProperty(MessageConst.PROPERTY_MESSAGE_TYPE));
                    r.put("arrive_time", reply.getProperty(MessageConst.PROPERTY_REPLY_MESSAGE_ARRIVE_TIME));
                } catch (Exception e) {
                    r.put("event", "error");
                    r.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                }
                out.write(r);
            }
        } finally {
            producer.shutdown();
        }
    }

    private static void respond(Args a, Journal out) throws Exception {
        DefaultMQProducer replier = new DefaultMQProducer(a.get("group") + "-replier");
        replier.setNamesrvAddr(a.get("namesrv"));
        replier.setInstanceName("sluice-interop-replier-" + ProcessHandle.current().pid());
        replier.start();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(a.get("group"));
        consumer.setNamesrvAddr(a.get("namesrv"));
        consumer.setInstanceName("sluice-interop-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(a.get("topic"), "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                JSONObject r = new JSONObject();
                try {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8).toUpperCase(Locale.ROOT);
                    Message reply = MessageUtil.createReplyMessage(m, body.getBytes(StandardCharsets.UTF_8));
                    SendResult result = replier.send(reply, 10_000);
                    r.put("event", "replied");
                    r.put("status", result.getSendStatus().name());
                    r.put("correlation_id", m.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
                    r.put("reply_topic", reply.getTopic());
                } catch (Exception e) {
                    r.put("event", "error");
                    r.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                }
                out.write(r);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        out.event("started");
        try {
            Waits.until(Waits.deadline(a), a.get("stop-file", ""), () -> false);
        } finally {
            consumer.shutdown();
            replier.shutdown();
        }
    }
}
