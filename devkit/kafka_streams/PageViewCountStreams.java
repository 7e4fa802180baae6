/*
 * Page views counted per page by Kafka Streams: the field's reference implementation, run beside
 * the processor on the same brokers by the benchmarks (devkit/kafka_streams/__init__.py).
 *
 * The topology is the one the Kafka Streams documentation gives for a count:
 * stream(input) -> groupByKey -> count(store "counts") -> toStream -> to(output), the count written
 * as a UTF-8 decimal (b"42"), the processor's output contract, at the time it is produced, into
 * its views' partition. Its changelog is Kafka Streams' own name for the store,
 * <application.id>-counts-changelog, which is the processor's too.
 *
 * Usage: java -cp <kafka libs>/*:<classes> PageViewCountStreams <properties file>
 *
 * The file holds StreamsConfig keys as Kafka Streams' documentation names them, plus four of
 * this harness: input.topic, output.topic, health.port and leave.group.on.close (CloseOptions'
 * leaveGroup: false for a static member, which keeps its partitions through a restart). The
 * health port answers the bench as the processor's does: GET /ready {"ready": bool,
 * "partitions": [...]} (ready: RUNNING and no store restoring) and GET /metrics in Prometheus
 * text, with the processor's metric names where Kafka Streams has the same figure
 * (rebalances, restored records, restore seconds, start to first output). SIGTERM closes it.
 */

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.LocalTime;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import java.util.zip.CRC32;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

public final class PageViewCountStreams {
    static final String STORE = "counts";
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(60);

    static final AtomicLong rebalances = new AtomicLong();
    static final AtomicLong restoredRecords = new AtomicLong();
    static final AtomicLong restoreNanos = new AtomicLong();
    static final AtomicLong firstOutputAtMs = new AtomicLong();
    static final RestoreCounter RESTORES = new RestoreCounter();

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: PageViewCountStreams <properties file>");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = Files.newInputStream(Paths.get(args[0]))) {
            props.load(in);
        }
        String input = (String) props.remove("input.topic");
        String output = (String) props.remove("output.topic");
        int healthPort = Integer.parseInt((String) props.remove("health.port"));
        boolean leaveGroup = Boolean.parseBoolean((String) props.remove("leave.group.on.close"));

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .count(Materialized.as(STORE))
                .toStream()
                .processValues(OutputAtProcessingTime::new)
                .to(output, Produced.with(Serdes.String(), Serdes.String())
                        .withStreamPartitioner(PageViewCountStreams::inputPartition));

        KafkaStreams streams = new KafkaStreams(builder.build(props), new StreamsConfig(props));
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.REBALANCING) {
                rebalances.incrementAndGet();
            }
            say("state " + before + " -> " + now);
        });
        streams.setGlobalStateRestoreListener(RESTORES);

        HttpServer health = HttpServer.create(new InetSocketAddress("127.0.0.1", healthPort), 0);
        health.createContext("/ready", exchange -> answer(exchange, "application/json", ready(streams)));
        health.createContext("/metrics", exchange -> answer(exchange, "text/plain; version=0.0.4", metrics()));
        health.start();

        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            say("SIGTERM: closing");
            boolean closed = streams.close(
                    new KafkaStreams.CloseOptions().timeout(CLOSE_TIMEOUT).leaveGroup(leaveGroup));
            health.stop(0);
            say(closed ? "closed" : "not closed within " + CLOSE_TIMEOUT);
            // A clean close exits 0, as the processor does (the JVM's own status would be 143).
            Runtime.getRuntime().halt(closed ? 0 : 1);
        }, "shutdown"));
        streams.start();
        new CountDownLatch(1).await();
    }

    /**
     * A page's partition as the producers of the input chose it: librdkafka's default
     * partitioner (consistent_random: the CRC32 of the key), where Kafka Streams' default
     * (murmur2) would put a page's count in another partition than its views. The processor
     * writes a count into its views' partition too, so the bench's per-partition gaps compare.
     */
    static Optional<Set<Integer>> inputPartition(String topic, String key, String value, int partitions) {
        CRC32 crc = new CRC32();
        crc.update(key.getBytes(StandardCharsets.UTF_8));
        return Optional.of(Set.of((int) (crc.getValue() % partitions)));
    }

    /** The input partitions of this instance's active (or standby) tasks. */
    static String partitions(KafkaStreams streams, boolean standby) {
        TreeSet<Integer> owned = new TreeSet<>();
        for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
            (standby ? thread.standbyTasks() : thread.activeTasks()).forEach(task -> {
                for (TopicPartition tp : task.topicPartitions()) {
                    owned.add(tp.partition());
                }
            });
        }
        return owned.stream().map(String::valueOf).collect(Collectors.joining(", "));
    }

    static String ready(KafkaStreams streams) {
        KafkaStreams.State state = streams.state();
        boolean ready = state == KafkaStreams.State.RUNNING && !RESTORES.restoring();
        return "{\"ready\": " + ready + ", \"state\": \"" + state + "\", \"partitions\": ["
                + (ready ? partitions(streams, false) : "") + "], \"standby\": ["
                + (ready ? partitions(streams, true) : "") + "]}";
    }

    static String metrics() {
        long started = ManagementFactory.getRuntimeMXBean().getStartTime();
        long first = firstOutputAtMs.get();
        StringBuilder text = new StringBuilder();
        gauge(text, "processor_rebalances_total", "counter", rebalances.get());
        gauge(text, "processor_restore_records_total", "counter", restoredRecords.get());
        gauge(text, "processor_restore_read_seconds_total", "counter", restoreNanos.get() / 1e9);
        gauge(text, "processor_restore_duration_seconds", "gauge", restoreNanos.get() / 1e9);
        gauge(text, "processor_start_duration_seconds", "gauge", first == 0 ? 0 : (first - started) / 1e3);
        return text.toString();
    }

    /** One line of the instance's own log, timed as log4j's lines are. */
    static void say(String line) {
        System.err.println(LocalTime.now() + " " + line);
        System.err.flush();
    }

    static void gauge(StringBuilder text, String name, String type, double value) {
        text.append("# TYPE ").append(name).append(' ').append(type).append('\n');
        text.append(name).append(' ').append(value).append('\n');
    }

    static void answer(HttpExchange exchange, String type, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().set("Content-Type", type);
        exchange.sendResponseHeaders(200, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }

    /**
     * The count as a decimal, timestamped when it is produced (as the processor's output is):
     * Kafka Streams would give an aggregate its input's event time, and the bench reads
     * the output's gaps and latencies off the output records' timestamps.
     */
    static final class OutputAtProcessingTime implements FixedKeyProcessor<String, Long, String> {
        private FixedKeyProcessorContext<String, String> context;

        @Override
        public void init(FixedKeyProcessorContext<String, String> context) {
            this.context = context;
        }

        @Override
        public void process(FixedKeyRecord<String, Long> record) {
            long now = System.currentTimeMillis();
            firstOutputAtMs.compareAndSet(0, now);
            context.forward(record.withValue(Long.toString(record.value())).withTimestamp(now));
        }
    }

    /** Restored records, and the seconds some store partition was restoring (the union). */
    static final class RestoreCounter implements StateRestoreListener {
        private int restoring;
        private long since;

        @Override
        public synchronized void onRestoreStart(TopicPartition tp, String store, long start, long end) {
            if (restoring++ == 0) {
                since = System.nanoTime();
            }
        }

        @Override
        public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long records) {
            restoredRecords.addAndGet(records);
        }

        @Override
        public void onRestoreEnd(TopicPartition tp, String store, long total) {
            ended();
        }

        @Override
        public void onRestoreSuspended(TopicPartition tp, String store, long total) {
            ended();
        }

        synchronized boolean restoring() {
            return restoring > 0;
        }

        private synchronized void ended() {
            if (restoring > 0 && --restoring == 0) {
                restoreNanos.addAndGet(System.nanoTime() - since);
            }
        }
    }
}
