package sluice.interop5lite;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * Lite topics with the official RocketMQ 5.x Java client against a gRPC endpoint (plaintext). One JSON line per
 * event on stdout.
 *
 * <pre>
 *   Lite ENDPOINT produce PARENT LITE_TOPIC COUNT [LITE_TOPIC COUNT]...
 *   Lite ENDPOINT consume PARENT GROUP COUNT TIMEOUT_S LITE_TOPIC...   (a body ending in "-7" fails once)
 *   Lite ENDPOINT unsubscribe PARENT GROUP LITE_TOPIC TIMEOUT_S   (waits until the server unsubscribes it)
 * </pre>
 */
public final class Lite {
    private Lite() {
    }

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String view(MessageView m) {
        String body = StandardCharsets.UTF_8.decode(m.getBody()).toString();
        return "{\"event\":\"consumed\",\"body\":" + quote(body) + ",\"lite_topic\":"
            + quote(m.getLiteTopic().orElse("")) + ",\"topic\":" + quote(m.getTopic()) + ",\"attempt\":"
            + m.getDeliveryAttempt() + "}";
    }

    public static void main(String[] argv) throws Exception {
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(argv[0])
            .setRequestTimeout(Duration.ofSeconds(5)).enableSsl(false).build();
        String mode = argv[1];
        String parent = argv[2];
        if (mode.equals("produce")) {
            try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config).setTopics(parent)
                .build()) {
                for (int arg = 3; arg + 1 < argv.length; arg += 2) {
                    String lite = argv[arg];
                    int count = Integer.parseInt(argv[arg + 1]);
                    for (int i = 0; i < count; i++) {
                        Message msg = provider.newMessageBuilder().setTopic(parent).setLiteTopic(lite)
                            .setBody((lite + "-" + i).getBytes(StandardCharsets.UTF_8)).build();
                        SendReceipt r = producer.send(msg);
                        emit("{\"event\":\"sent\",\"body\":" + quote(lite + "-" + i) + ",\"message_id\":"
                            + quote(r.getMessageId().toString()) + "}");
                    }
                }
            }
            return;
        }
        String group = argv[3];
        if (mode.equals("consume")) {
            int count = Integer.parseInt(argv[4]);
            long deadline = System.currentTimeMillis() + Long.parseLong(argv[5]) * 1000;
            Set<String> consumed = ConcurrentHashMap.newKeySet();
            Set<String> failedOnce = ConcurrentHashMap.newKeySet();
            LitePushConsumer consumer = provider.newLitePushConsumerBuilder().setClientConfiguration(config)
                .setConsumerGroup(group).bindTopic(parent).setMessageListener(m -> {
                    String body = StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString();
                    emit(view(m));
                    if (body.endsWith("-7") && failedOnce.add(body)) {
                        return ConsumeResult.FAILURE;
                    }
                    consumed.add(body);
                    return ConsumeResult.SUCCESS;
                }).build();
            try {
                for (int i = 6; i < argv.length; i++) {
                    consumer.subscribeLite(argv[i]);
                }
                emit("{\"event\":\"subscribed\",\"lite_topics\":" + consumer.getLiteTopicSet().size() + "}");
                while (consumed.size() < count && System.currentTimeMillis() < deadline) {
                    Thread.sleep(50);
                }
                emit("{\"event\":\"done\",\"consumed\":" + consumed.size() + "}");
            } finally {
                consumer.close();
            }
            return;
        }
        if (mode.equals("unsubscribe")) {
            String lite = argv[4];
            long deadline = System.currentTimeMillis() + Long.parseLong(argv[5]) * 1000;
            LitePushConsumer consumer = provider.newLitePushConsumerBuilder().setClientConfiguration(config)
                .setConsumerGroup(group).bindTopic(parent).setMessageListener(m -> ConsumeResult.SUCCESS).build();
            try {
                consumer.subscribeLite(lite);
                emit("{\"event\":\"subscribed\",\"lite_topics\":" + consumer.getLiteTopicSet().size() + "}");
                while (consumer.getLiteTopicSet().contains(lite) && System.currentTimeMillis() < deadline) {
                    Thread.sleep(50);
                }
                emit("{\"event\":\"done\",\"lite_topics\":" + consumer.getLiteTopicSet().size() + "}");
            } finally {
                consumer.close();
            }
            return;
        }
        throw new IllegalArgumentException("unknown mode " + mode);
    }
}
