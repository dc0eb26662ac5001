package sluice.interop;

import com.alibaba.fastjson2.JSONObject;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * A load generator on the Java client, the same cases as {@code sluice bench}: {@code --mode sync} ({@code
 * --threads} threads of sync sends), {@code async} (one producer, {@code --window} sends in flight), {@code batch}
 * ({@code --threads} threads of {@code --batch}-message sends) and {@code consume} (a push consumer reading
 * {@code --count} messages from the first offset, or what it finds until none came for 5 s). Sends
 * {@code --warmup} messages first, then {@code --count} or for {@code --duration} seconds; writes one JSON line:
 * messages, seconds, msgs_per_s, p50_ms / p99_ms of the send latency, errors.
 */
final class Bench {
    private Bench() {
    }

    static int run(Args a) throws Exception {
        String mode = a.get("mode");
        JSONObject result = mode.equals("consume") ? consume(a) : produce(a, mode);
        result.put("event", "result");
        result.put("mode", mode);
        try (Journal out = new Journal(a.get("out"))) {
            out.write(result);
        }
        return 0;
    }

    private static JSONObject produce(Args a, String mode) throws Exception {
        int threads = a.getInt("threads", 4);
        double duration = a.getDouble("duration", 0);
        int count = duration > 0 ? Integer.MAX_VALUE : a.getInt("count", 100_000);
        int warmup = a.getInt("warmup", 2_000);
        int size = a.getInt("size", 128);
        int batch = a.getInt("batch", 64);
        int window = a.getInt("window", 1_000);
        String topic = a.get("topic");
        DefaultMQProducer producer = new DefaultMQProducer(a.get("group", "java-bench-producers"));
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setSendMsgTimeout(10_000);
        producer.setInstanceName("sluice-bench-" + ProcessHandle.current().pid());
        producer.setMaxMessageSize(8 << 20);
        producer.start();
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        AtomicLong errors = new AtomicLong();
        try {
            // warm up: routes, connections, the JIT
            runSends(producer, mode, topic, body, Math.max(1, Math.min(threads, 2)), warmup, batch,
                Math.min(window, 100), new long[warmup], errors, Long.MAX_VALUE);
            errors.set(0);
            long[] latencies = new long[duration > 0 ? 4_000_000 : mode.equals("batch") ? count / batch + threads
                : count];
            long t0 = System.nanoTime();
            long deadline = duration > 0 ? t0 + (long) (duration * 1e9) : Long.MAX_VALUE;
            int sent = runSends(producer, mode, topic, body, threads, count, batch, window, latencies, errors,
                deadline);
            double seconds = (System.nanoTime() - t0) / 1e9;
            JSONObject o = new JSONObject();
            o.put("messages", sent);
            o.put("seconds", seconds);
            o.put("msgs_per_s", sent / seconds);
            int n = mode.equals("batch") ? (int) latencyCount.get() : sent;
            long[] used = Arrays.copyOf(latencies, Math.min(n, latencies.length));
            Arrays.sort(used);
            o.put("p50_ms", used.length == 0 ? 0 : used[used.length / 2] / 1e6);
            o.put("p99_ms", used.length == 0 ? 0 : used[Math.min(used.length - 1, (int) (used.length * 0.99))] / 1e6);
            o.put("errors", errors.get());
            return o;
        } finally {
            producer.shutdown();
        }
    }

    private static final AtomicLong latencyCount = new AtomicLong();

    /** Sends {@code count} messages; latencies in ns land in {@code latencies} (one per send call). */
    private static int runSends(DefaultMQProducer producer, String mode, String topic, byte[] body, int threads,
                                int count, int batch, int window, long[] latencies, AtomicLong errors,
                                long deadline) throws Exception {
        latencyCount.set(0);
        if (mode.equals("async")) {
            Semaphore room = new Semaphore(window);
            AtomicInteger done = new AtomicInteger();
            int issued = 0;
            for (int i = 0; i < count && System.nanoTime() < deadline; i++) {
                issued++;
                room.acquire();
                final long start = System.nanoTime();
                producer.send(new Message(topic, body), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        record(latencies, System.nanoTime() - start);
                        if (r.getSendStatus() != SendStatus.SEND_OK) {
                            errors.incrementAndGet();
                        }
                        done.incrementAndGet();
                        room.release();
                    }

                    @Override
                    public void onException(Throwable e) {
                        errors.incrementAndGet();
                        done.incrementAndGet();
                        room.release();
                    }
                });
            }
            if (!room.tryAcquire(window, 120, TimeUnit.SECONDS)) {
                throw new IllegalStateException("async sends unanswered after 120 s");
            }
            return issued;
        }
        AtomicInteger next = new AtomicInteger();
        AtomicInteger sent = new AtomicInteger();
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread w = new Thread(() -> {
                while (true) {
                    int n = mode.equals("batch") ? batch : 1;
                    int first = next.getAndAdd(n);
                    if (first >= count || first < 0 || System.nanoTime() >= deadline) {
                        return;
                    }
                    n = Math.min(n, count - first);
                    long start = System.nanoTime();
                    try {
                        SendResult r;
                        if (mode.equals("batch")) {
                            List<Message> msgs = new ArrayList<>(n);
                            for (int k = 0; k < n; k++) {
                                msgs.add(new Message(topic, body));
                            }
                            r = producer.send(msgs);
                        } else {
                            r = producer.send(new Message(topic, body));
                        }
                        record(latencies, System.nanoTime() - start);
                        if (r.getSendStatus() != SendStatus.SEND_OK) {
                            errors.addAndGet(n);
                        }
                        sent.addAndGet(n);
                    } catch (Exception e) {
                        errors.addAndGet(n);
                    }
                }
            }, "bench-sender-" + t);
            w.start();
            workers.add(w);
        }
        for (Thread w : workers) {
            w.join();
        }
        return sent.get();
    }

    private static void record(long[] latencies, long nanos) {
        long i = latencyCount.getAndIncrement();
        if (i < latencies.length) {
            latencies[(int) i] = nanos;
        }
    }

    private static JSONObject consume(Args a) throws Exception {
        int count = a.getInt("count", Integer.MAX_VALUE);
        AtomicLong got = new AtomicLong();
        AtomicLong firstAt = new AtomicLong();
        AtomicLong lastAt = new AtomicLong();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(a.get("group"));
        consumer.setNamesrvAddr(a.get("namesrv"));
        consumer.setInstanceName("sluice-bench-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeMessageBatchMaxSize(a.getInt("consume-batch", 32));
        consumer.setPullBatchSize(32);
        consumer.subscribe(a.get("topic"), "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.nanoTime();
            firstAt.compareAndSet(0, now);
            got.addAndGet(msgs.size());
            lastAt.accumulateAndGet(now, Math::max);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long t0 = System.nanoTime();
        consumer.start();
        long deadline = t0 + (long) (a.getDouble("timeout", 300) * 1e9);
        while (got.get() < count && System.nanoTime() < deadline) {
            Thread.sleep(5);
            if (lastAt.get() > 0 && System.nanoTime() - lastAt.get() > 5_000_000_000L) {
                break;  // the backlog is drained
            }
        }
        double seconds = (lastAt.get() - firstAt.get()) / 1e9;
        JSONObject o = new JSONObject();
        o.put("messages", got.get());
        o.put("seconds", seconds);
        o.put("msgs_per_s", seconds > 0 ? got.get() / seconds : 0);
        o.put("seconds_from_start", (lastAt.get() - t0) / 1e9);
        o.put("errors", 0);
        consumer.shutdown();
        return o;
    }
}
