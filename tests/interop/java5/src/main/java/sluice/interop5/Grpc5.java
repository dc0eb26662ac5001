package sluice.interop5;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * The official RocketMQ 5.x Java client against a gRPC endpoint. One JSON line per event on stdout.
 *
 * <pre>
 *   Grpc5 ENDPOINT STEP [-- STEP]...    (the steps one after the other, in this one JVM), a STEP being one of
 *     produce TOPIC COUNT [GROUP]     (GROUP: a FIFO message group)
 *     simple TOPIC CONSUMER_GROUP COUNT TIMEOUT_S
 *     push TOPIC CONSUMER_GROUP COUNT TIMEOUT_S   (a body ending in 7 fails once)
 * </pre>
 * Each step starts with the line {"event":"step","mode":MODE}; its clients are closed before the next starts.
 */
public final class Grpc5 {
    private Grpc5() {
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

    static String view(String event, MessageView m) {
        String body = StandardCharsets.UTF_8.decode(m.getBody()).toString();
        return "{\"event\":" + quote(event) + ",\"body\":" + quote(body) + ",\"message_id\":"
            + quote(m.getMessageId().toString()) + ",\"tag\":" + quote(m.getTag().orElse("")) + ",\"attempt\":"
            + m.getDeliveryAttempt() + ",\"group\":" + quote(m.getMessageGroup().orElse("")) + "}";
    }

    public static void main(String[] argv) throws Exception {
        String endpoint = argv[0];
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        // The client's default is TLS on, trusting any certificate; GRPC5_TLS=default keeps it, else plaintext.
        org.apache.rocketmq.client.apis.ClientConfigurationBuilder builder = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .setRequestTimeout(Duration.ofSeconds(5));
        if (!"default".equals(System.getenv("GRPC5_TLS"))) {
            builder.enableSsl(false);
        }
        ClientConfiguration config = builder.build();
        List<String> step = new ArrayList<>();
        for (int i = 1; i <= argv.length; i++) {
            if (i == argv.length || argv[i].equals("--")) {
                String[] args = new String[step.size() + 1];
                args[0] = endpoint;
                for (int j = 0; j < step.size(); j++) {
                    args[j + 1] = step.get(j);
                }
                emit("{\"event\":\"step\",\"mode\":" + quote(args[1]) + "}");
                run(provider, config, args);
                step.clear();
            } else {
                step.add(argv[i]);
            }
        }
    }

    static void run(ClientServiceProvider provider, ClientConfiguration config, String[] args) throws Exception {
        String mode = args[1];
        switch (mode) {
            case "produce": {
                String topic = args[2];
                int count = Integer.parseInt(args[3]);
                String group = args.length > 4 ? args[4] : "";
                try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config)
                    .setTopics(topic).build()) {
                    for (int i = 0; i < count; i++) {
                        String body = "j-" + i;
                        var builder = provider.newMessageBuilder().setTopic(topic).setTag("t")
                            .setKeys("key-" + i).addProperty("index", Integer.toString(i))
                            .setBody(body.getBytes(StandardCharsets.UTF_8));
                        if (!group.isEmpty()) {
                            builder.setMessageGroup(group);
                        }
                        Message message = builder.build();
                        SendReceipt r = producer.send(message);
                        emit("{\"event\":\"sent\",\"body\":" + quote(body) + ",\"message_id\":"
                            + quote(r.getMessageId().toString()) + "}");
                    }
                }
                break;
            }
            case "simple": {
                String topic = args[2];
                String group = args[3];
                int count = Integer.parseInt(args[4]);
                long deadline = System.nanoTime() + Long.parseLong(args[5]) * 1_000_000_000L;
                int acked = 0;
                try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(config)
                    .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(5))
                    .setSubscriptionExpressions(Collections.singletonMap(topic,
                        new FilterExpression("*", FilterExpressionType.TAG))).build()) {
                    while (acked < count && System.nanoTime() < deadline) {
                        List<MessageView> got = consumer.receive(16, Duration.ofSeconds(15));
                        for (MessageView m : got) {
                            emit(view("received", m));
                            consumer.ack(m);
                            acked++;
                        }
                    }
                }
                emit("{\"event\":\"done\",\"acked\":" + acked + "}");
                break;
            }
            case "push": {
                String topic = args[2];
                String group = args[3];
                int count = Integer.parseInt(args[4]);
                long deadline = System.nanoTime() + Long.parseLong(args[5]) * 1_000_000_000L;
                Set<String> failed = ConcurrentHashMap.newKeySet();
                Set<String> done = ConcurrentHashMap.newKeySet();
                AtomicInteger calls = new AtomicInteger();
                try (PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(config)
                    .setConsumerGroup(group).setSubscriptionExpressions(Collections.singletonMap(topic,
                        new FilterExpression("*", FilterExpressionType.TAG)))
                    .setMessageListener(m -> {
                        calls.incrementAndGet();
                        emit(view("received", m));
                        String body = StandardCharsets.UTF_8.decode(m.getBody()).toString();
                        if (body.endsWith("7") && failed.add(body)) {
                            return ConsumeResult.FAILURE;
                        }
                        done.add(body);
                        return ConsumeResult.SUCCESS;
                    }).build()) {
                    while (done.size() < count && System.nanoTime() < deadline) {
                        Thread.sleep(100);
                    }
                    Thread.sleep(1000);  // the last acks go out after the listener returns
                }
                emit("{\"event\":\"done\",\"consumed\":" + done.size() + "}");
                break;
            }
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
    }
}
