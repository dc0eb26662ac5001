package sluice.interop5;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
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

/**
 * A load generator on the official RocketMQ 5.x Java client (gRPC), for bench/grpc_reference.py: the same cases
 * against Sluice's gRPC front and RocketMQ's proxy.
 *
 * <pre>
 *   Bench5 ENDPOINT sync TOPIC THREADS SECONDS        THREADS threads of Producer.send, 128-byte bodies
 *   Bench5 ENDPOINT async TOPIC WINDOW SECONDS        Producer.sendAsync, WINDOW sends in flight
 *   Bench5 ENDPOINT simple TOPIC GROUP THREADS COUNT  THREADS threads of SimpleConsumer.receive(32) + ackAsync
 *   Bench5 ENDPOINT push TOPIC GROUP THREADS COUNT    a PushConsumer with THREADS consumption threads
 * </pre>
 * A producer first sends 2,000 unmeasured messages to the same topic (routes, channels, the JIT). A consumer reads
 * COUNT messages, or what it finds until none came for 5 s; its time runs from its first message to its last. The
 * lines {"event":"start"} and {"event":"end"} mark the measured part; the last line is the result: messages, seconds,
 * msgs_per_s, p50_ms / p99_ms (a send's latency; a receive's and its acks' for the simple consumer; none for push),
 * errors, and a producer's warmup (the unmeasured messages it stored).
 */
public final class Bench5 {
    private static final int SIZE = 128;
    private static final long IDLE_NANOS = 5_000_000_000L;
    private static final long FIRST_WAIT_NANOS = 60_000_000_000L;
    private static final int WARMUP = 2_000;

    private Bench5() {
    }

    public static void main(String[] argv) throws Exception {
        String endpoint = argv[0];
        String mode = argv[1];
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        String result;
        switch (mode) {
            case "sync":
            case "async":
                result = produce(provider, config, mode, argv[2], Integer.parseInt(argv[3]),
                    Double.parseDouble(argv[4]));
                break;
            case "simple":
                result = simple(provider, config, argv[2], argv[3], Integer.parseInt(argv[4]),
                    Integer.parseInt(argv[5]));
                break;
            case "push":
                result = push(provider, config, argv[2], argv[3], Integer.parseInt(argv[4]),
                    Integer.parseInt(argv[5]));
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
        System.out.println(result);
        System.out.flush();
        System.exit(0);  // (the client's own threads outlive a closed client for a while)
    }

    static Message message(ClientServiceProvider provider, String topic, byte[] body) {
        return provider.newMessageBuilder().setTopic(topic).setBody(body).build();
    }

    static String produce(ClientServiceProvider provider, ClientConfiguration config, String mode, String topic,
                          int parallel, double seconds) throws Exception {
        byte[] body = new byte[SIZE];
        Arrays.fill(body, (byte) 'x');
        AtomicLong errors = new AtomicLong();
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic)
            .build()) {
            int warmedUp = sendFor(producer, provider, mode, topic, body, Math.min(parallel, 4), Long.MAX_VALUE,
                WARMUP, new Latencies(WARMUP), errors);
            errors.set(0);
            Latencies latencies = new Latencies(8_000_000);
            mark("start");
            long t0 = System.nanoTime();
            int sent = sendFor(producer, provider, mode, topic, body, parallel, t0 + (long) (seconds * 1e9),
                Integer.MAX_VALUE, latencies, errors);
            double took = (System.nanoTime() - t0) / 1e9;
            mark("end");
            return latencies.json(sent, took, errors.get(), ",\"warmup\":" + warmedUp);
        }
    }

    static int sendFor(Producer producer, ClientServiceProvider provider, String mode, String topic, byte[] body,
                       int parallel, long deadline, int count, Latencies latencies, AtomicLong errors)
        throws Exception {
        AtomicInteger sent = new AtomicInteger();
        if (mode.equals("async")) {
            Semaphore window = new Semaphore(parallel);
            int started = 0;
            while (started < count && System.nanoTime() < deadline) {
                window.acquire();
                started++;
                long t = System.nanoTime();
                producer.sendAsync(message(provider, topic, body)).whenComplete((r, e) -> {
                    if (e != null) {
                        errors.incrementAndGet();
                    } else {
                        latencies.add(System.nanoTime() - t);
                        sent.incrementAndGet();
                    }
                    window.release();
                });
            }
            window.acquire(parallel);
            return sent.get();
        }
        AtomicInteger started = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < parallel; i++) {
            Thread th = new Thread(() -> {
                while (started.incrementAndGet() <= count && System.nanoTime() < deadline) {
                    long t = System.nanoTime();
                    try {
                        producer.send(message(provider, topic, body));
                        latencies.add(System.nanoTime() - t);
                        sent.incrementAndGet();
                    } catch (Exception e) {
                        errors.incrementAndGet();
                    }
                }
            });
            th.start();
            threads.add(th);
        }
        for (Thread th : threads) {
            th.join();
        }
        return sent.get();
    }

    static String simple(ClientServiceProvider provider, ClientConfiguration config, String topic, String group,
                         int parallel, int count) throws Exception {
        AtomicInteger acked = new AtomicInteger();
        AtomicLong errors = new AtomicLong();
        Arrivals arrivals = new Arrivals();
        Latencies latencies = new Latencies(count + 1_000);
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Collections.singletonMap(topic,
                new FilterExpression("*", FilterExpressionType.TAG))).build()) {
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < parallel; i++) {
                Thread th = new Thread(() -> {
                    while (acked.get() < count && !arrivals.idle()) {
                        long t = System.nanoTime();
                        List<MessageView> got;
                        try {
                            got = consumer.receive(32, Duration.ofSeconds(30));
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            pause();
                            continue;
                        }
                        if (got.isEmpty()) {
                            continue;
                        }
                        arrivals.seen();
                        List<CompletableFuture<Void>> acks = new ArrayList<>(got.size());
                        for (MessageView m : got) {
                            acks.add(consumer.ackAsync(m));
                        }
                        for (CompletableFuture<Void> a : acks) {
                            try {
                                a.get(30, TimeUnit.SECONDS);
                                acked.incrementAndGet();
                            } catch (Exception e) {
                                errors.incrementAndGet();
                            }
                        }
                        latencies.add(System.nanoTime() - t);
                    }
                });
                th.start();
                threads.add(th);
            }
            for (Thread th : threads) {
                th.join();
            }
            mark("end");
        }
        return latencies.json(acked.get(), arrivals.seconds(), errors.get(), "");
    }

    static String push(ClientServiceProvider provider, ClientConfiguration config, String topic, String group,
                       int parallel, int count) throws Exception {
        AtomicInteger consumed = new AtomicInteger();
        Arrivals arrivals = new Arrivals();
        try (PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(group).setConsumptionThreadCount(parallel)
            .setSubscriptionExpressions(Collections.singletonMap(topic,
                new FilterExpression("*", FilterExpressionType.TAG)))
            .setMessageListener(m -> {
                arrivals.seen();
                consumed.incrementAndGet();
                return ConsumeResult.SUCCESS;
            }).build()) {
            while (consumed.get() < count && !arrivals.idle()) {
                Thread.sleep(20);
            }
            mark("end");
        }
        return new Latencies(0).json(consumed.get(), arrivals.seconds(), 0, "");
    }

    /** The lines bench/grpc_reference.py counts the servers' CPU between: "start" and "end". */
    static void mark(String event) {
        System.out.println("{\"event\":\"" + event + "\"}");
        System.out.flush();
    }

    static void pause() {
        try {
            Thread.sleep(100);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** When a consumer's first and latest messages came (its rate counts from the first: not the client's start). */
    static final class Arrivals {
        private static final long NONE = Long.MIN_VALUE;
        private final long created = System.nanoTime();
        private final AtomicLong first = new AtomicLong(NONE);
        private final AtomicLong last = new AtomicLong(NONE);

        void seen() {
            long now = System.nanoTime();
            if (first.get() == NONE && first.compareAndSet(NONE, now)) {
                mark("start");
            }
            last.set(now);
        }

        /** Nothing for 5 s since the latest message, or no first message within 60 s. */
        boolean idle() {
            long now = System.nanoTime();
            return first.get() == NONE ? now - created > FIRST_WAIT_NANOS : now - last.get() > IDLE_NANOS;
        }

        double seconds() {
            return first.get() == NONE ? 0 : (last.get() - first.get()) / 1e9;
        }
    }

    /** Latencies in nanoseconds, from any thread. */
    static final class Latencies {
        private final long[] values;
        private final AtomicInteger n = new AtomicInteger();

        Latencies(int capacity) {
            values = new long[capacity];
        }

        void add(long nanos) {
            int i = n.getAndIncrement();
            if (i < values.length) {
                values[i] = nanos;
            }
        }

        String json(int messages, double seconds, long errors, String more) {
            long[] used = Arrays.copyOf(values, Math.min(n.get(), values.length));
            Arrays.sort(used);
            String p50 = used.length == 0 ? "null" : Double.toString(used[used.length / 2] / 1e6);
            String p99 = used.length == 0 ? "null" : Double.toString(used[(int) (used.length * 0.99)] / 1e6);
            return "{\"event\":\"result\",\"messages\":" + messages + ",\"seconds\":" + seconds + ",\"msgs_per_s\":"
                + (seconds > 0 ? messages / seconds : 0) + ",\"p50_ms\":" + p50 + ",\"p99_ms\":" + p99
                + ",\"errors\":" + errors + more + "}";
        }
    }
}
