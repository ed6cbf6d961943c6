import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.Stores;

/**
 * The {@code streams-group} step of SampleClients: a Kafka Streams application whose instances form a streams
 * group (KIP-1071, {@code group.protocol=streams}: StreamsGroupHeartbeat, tasks assigned by the broker).
 *
 * <pre>
 *   streams-group client.id=FEEDER application.id=APP input=IN output=OUT instances=I1,I2 join_s=0,8 seconds=24
 *                 interval_ms=200 [store=NAME] [settle_ms=3000] [leave_pause_ms=0] [timeout.s=60]
 *                 [streams settings with a dot ...]
 * </pre>
 *
 * A feeder producer ({@code client.id}; keys starting with {@code feeder.} are its settings) writes one record every
 * interval_ms for the given seconds, round-robin over the input's partitions, eight keys. The topology counts the
 * records per key in an in-memory store (so it has a changelog topic, and standby tasks when the group asks for
 * them) and writes the counts to the output topic; a processor before the count notes every record's partition and
 * offset. Each instance (its name is its {@code client.id}; its threads' clients are named after it) starts at its
 * join time. Every 100 ms the instances' own view of their tasks ({@code metadataForLocalThreads()}) is read and
 * each change logged with the wall clock ({@code time_ms}), as is every state change. Once the feeder is done and
 * every record it was acknowledged for has been processed, and settle_ms later (a few commit intervals), the
 * instances close, the later one first, leave_pause_ms apart (the others taking its tasks back meanwhile). Other keys
 * with a dot go to every instance's StreamsConfig.
 */
public final class StreamsApp {
    private StreamsApp() {
    }

    private static final List<String> PRODUCER_COUNTERS =
        List.of("record-send-total", "record-retry-total", "record-error-total");

    private static long now() {
        return System.currentTimeMillis();
    }

    /** Notes each record's partition and offset for its instance, then passes it on unchanged. */
    private static final class Recorder implements FixedKeyProcessor<String, String, String> {
        private final Instance instance;
        private FixedKeyProcessorContext<String, String> context;

        Recorder(Instance instance) {
            this.instance = instance;
        }

        @Override
        public void init(FixedKeyProcessorContext<String, String> context) {
            this.context = context;
        }

        @Override
        public void process(FixedKeyRecord<String, String> record) {
            context.recordMetadata().ifPresent(m -> instance.processed(m.topic(), m.partition(), m.offset()));
            context.forward(record);
        }
    }

    /** One KafkaStreams instance and what it said. */
    private static final class Instance {
        final String name;
        final long joinAt;
        final Progress progress;
        final List<Map<String, Object>> states = Collections.synchronizedList(new ArrayList<>());
        final List<Map<String, Object>> tasks = Collections.synchronizedList(new ArrayList<>());
        final Map<String, Map<String, AtomicInteger>> processed = new ConcurrentHashMap<>();
        final Map<String, Object> clientIds = new LinkedHashMap<>();
        // the embedded producers' own counters per topic: {producer client id: {topic: {metric: value}}}
        Map<String, Map<String, Map<String, Long>>> produced = new TreeMap<>();
        KafkaStreams streams;
        Path stateDir;
        Object lastTasks;
        long startedMs;
        long closedMs;
        String error;

        Instance(String name, long joinAt, Progress progress) {
            this.name = name;
            this.joinAt = joinAt;
            this.progress = progress;
        }

        void processed(String topic, int partition, long offset) {
            processed.computeIfAbsent(topic, t -> new ConcurrentHashMap<>())
                .computeIfAbsent(Integer.toString(partition), p -> new AtomicInteger()).incrementAndGet();
            progress.processed(partition, offset);
        }

        /** The embedded producers' record-send/retry/error totals per topic, while the instance runs (its
         *  clients' metrics go when it closes). */
        void countProduced() {
            if (streams == null || closedMs > 0) {
                return;
            }
            Map<String, Map<String, Map<String, Long>>> counts = new TreeMap<>();
            try {
                streams.metrics().forEach((name, metric) -> {
                    if (name.group().equals("producer-topic-metrics") && PRODUCER_COUNTERS.contains(name.name())) {
                        Object value = metric.metricValue();
                        if (value instanceof Number) {
                            counts.computeIfAbsent(name.tags().get("client-id"), c -> new TreeMap<>())
                                .computeIfAbsent(name.tags().get("topic"), t -> new TreeMap<>())
                                .put(name.name(), ((Number) value).longValue());
                        }
                    }
                });
            } catch (RuntimeException e) {
                return;
            }
            if (!counts.isEmpty()) {
                produced = counts;
            }
        }

        /** Log the instance's tasks when they changed since the last look. */
        void look() {
            if (streams == null) {
                return;
            }
            countProduced();
            Set<ThreadMetadata> threads;
            try {
                threads = streams.metadataForLocalThreads();
            } catch (RuntimeException e) {
                return;
            }
            List<Object> active = new ArrayList<>();
            List<Object> standby = new ArrayList<>();
            for (ThreadMetadata thread : threads) {
                active.addAll(describe(thread.activeTasks()));
                standby.addAll(describe(thread.standbyTasks()));
                if (thread.consumerClientId() != null && !thread.consumerClientId().isEmpty()) {
                    clientIds.put("consumer", thread.consumerClientId());
                    clientIds.put("restore_consumer", thread.restoreConsumerClientId());
                    clientIds.put("producers", new ArrayList<>(thread.producerClientIds()));
                    clientIds.put("admin", thread.adminClientId());
                    clientIds.put("thread", thread.threadName());
                }
            }
            Map<String, Object> seen = new LinkedHashMap<>();
            seen.put("active", active);
            seen.put("standby", standby);
            if (!Objects.equals(seen, lastTasks)) {
                lastTasks = seen;
                Map<String, Object> entry = new LinkedHashMap<>();
                entry.put("time_ms", now());
                entry.putAll(seen);
                tasks.add(entry);
            }
        }

        private static List<Object> describe(Set<TaskMetadata> tasks) {
            List<TaskMetadata> sorted = new ArrayList<>(tasks);
            sorted.sort(Comparator.comparing(t -> t.taskId().toString()));
            List<Object> out = new ArrayList<>();
            for (TaskMetadata task : sorted) {
                Map<String, Object> entry = new LinkedHashMap<>();
                entry.put("task", task.taskId().toString());
                Map<String, List<Integer>> partitions = new TreeMap<>();
                for (TopicPartition tp : task.topicPartitions()) {
                    partitions.computeIfAbsent(tp.topic(), t -> new ArrayList<>()).add(tp.partition());
                }
                partitions.values().forEach(list -> list.sort(null));
                entry.put("partitions", partitions);
                out.add(entry);
            }
            return out;
        }

        Map<String, Object> result(String application) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("instance", name);
            out.put("application_id", application);
            out.put("client_ids", clientIds);
            out.put("join_ms", joinAt);
            out.put("started_ms", startedMs);
            out.put("closed_ms", closedMs);
            out.put("states", new ArrayList<>(states));
            out.put("tasks", new ArrayList<>(tasks));
            Map<String, Map<String, Integer>> counts = new TreeMap<>();
            processed.forEach((topic, parts) -> parts.forEach((p, n) ->
                counts.computeIfAbsent(topic, t -> new TreeMap<>()).put(p, n.get())));
            out.put("processed", counts);
            out.put("produced_metrics", produced);
            out.put("total", counts.values().stream().flatMap(m -> m.values().stream()).mapToInt(i -> i).sum());
            if (error != null) {
                out.put("instance_error", error);
            }
            return out;
        }
    }

    /** The feeder's acknowledged offsets and the furthest offset processed in each input partition. */
    private static final class Progress {
        final Map<String, List<Long>> offsets = new TreeMap<>();
        final Map<Integer, Long> processed = new ConcurrentHashMap<>();
        volatile boolean feederDone;

        void processed(int partition, long offset) {
            processed.merge(partition, offset, Math::max);
        }

        boolean allProcessed() {
            if (!feederDone) {
                return false;
            }
            synchronized (offsets) {
                for (Map.Entry<String, List<Long>> entry : offsets.entrySet()) {
                    long last = entry.getValue().stream().mapToLong(Long::longValue).max().orElse(-1);
                    Long done = processed.get(Integer.parseInt(entry.getKey()));
                    if (done == null || done < last) {
                        return false;
                    }
                }
            }
            return true;
        }
    }

    private static Topology topology(String input, String output, String store, Instance instance) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .processValues(() -> new Recorder(instance))
            .groupByKey()
            .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore(store))
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    public static void run(String bootstrap, Map<String, String> options, Map<String, Object> result) throws Exception {
        String application = options.get("application.id");
        String input = options.get("input");
        String output = options.get("output");
        String store = options.getOrDefault("store", application + "-store");
        List<String> names = List.of(options.get("instances").split(","));
        String[] joins = options.getOrDefault("join_s", "0").split(",");
        long seconds = Long.parseLong(options.getOrDefault("seconds", "24"));
        long intervalMs = Long.parseLong(options.getOrDefault("interval_ms", "200"));
        long settleMs = Long.parseLong(options.getOrDefault("settle_ms", "3000"));
        long leavePauseMs = Long.parseLong(options.getOrDefault("leave_pause_ms", "0"));
        long started = now();
        long deadline = started + TimeUnit.SECONDS.toMillis(seconds + Long.parseLong(options.getOrDefault("timeout.s",
            "60")));
        Progress progress = new Progress();
        List<Instance> instances = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            long join = i < joins.length ? Long.parseLong(joins[i]) : 0;
            instances.add(new Instance(names.get(i), started + TimeUnit.SECONDS.toMillis(join), progress));
        }

        Properties feederSettings = new Properties();
        feederSettings.put("bootstrap.servers", bootstrap);
        feederSettings.put("client.id", options.get("client.id"));
        feederSettings.put("acks", "all");
        feederSettings.put("enable.idempotence", "true");
        feederSettings.put("linger.ms", "5");
        feederSettings.put("key.serializer", StringSerializer.class.getName());
        feederSettings.put("value.serializer", StringSerializer.class.getName());
        options.forEach((key, value) -> {
            if (key.startsWith("feeder.")) {
                feederSettings.put(key.substring("feeder.".length()), value);
            }
        });
        List<String> failures = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger acknowledged = new AtomicInteger();
        AtomicInteger sent = new AtomicInteger();
        Throwable[] feederError = new Throwable[1];
        Thread feeder = new Thread(() -> {
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(feederSettings)) {
                int partitions = producer.partitionsFor(input).size();
                long end = started + TimeUnit.SECONDS.toMillis(seconds);
                long next = now();
                for (int i = 0; now() < end; i++) {
                    String value = "{\"topic\": \"" + input + "\", \"seq\": " + i + "}";
                    ProducerRecord<String, String> record =
                        new ProducerRecord<>(input, i % partitions, "key-" + (i % 8), value);
                    record.headers().add("origin", "sample_pcaps".getBytes(StandardCharsets.UTF_8));
                    producer.send(record, (metadata, exception) -> {
                        synchronized (progress.offsets) {
                            if (exception == null) {
                                progress.offsets.computeIfAbsent(Integer.toString(metadata.partition()),
                                    p -> new ArrayList<>()).add(metadata.offset());
                                acknowledged.incrementAndGet();
                            } else {
                                failures.add(exception.toString());
                            }
                        }
                    });
                    sent.incrementAndGet();
                    next += intervalMs;
                    Thread.sleep(Math.max(0, next - now()));
                }
                producer.flush();
            } catch (Throwable e) {
                feederError[0] = e;
            } finally {
                progress.feederDone = true;
            }
        }, "streams-feeder");

        feeder.start();
        long doneAt = -1;
        try {
            while (now() < deadline) {
                for (Instance instance : instances) {
                    if (instance.streams == null && now() >= instance.joinAt) {
                        start(instance, bootstrap, options, application, input, output, store);
                    }
                    instance.look();
                }
                if (doneAt < 0 && progress.allProcessed()) {
                    doneAt = now();
                }
                if (doneAt >= 0 && now() - doneAt >= settleMs) {
                    break;
                }
                Thread.sleep(100);
            }
        } finally {
            for (int i = instances.size() - 1; i >= 0; i--) {
                Instance instance = instances.get(i);
                if (instance.streams != null) {
                    instance.look();  // also the producers' last counters
                    Map<String, Object> closing = new LinkedHashMap<>();
                    closing.put("time_ms", now());
                    closing.put("event", "close");
                    instance.states.add(closing);
                    instance.streams.close(Duration.ofSeconds(20));
                    instance.closedMs = now();
                    // the instances still running take the tasks back: watch them for a while
                    long until = i > 0 ? now() + leavePauseMs : now();
                    do {
                        for (Instance other : instances) {
                            other.look();
                        }
                        Thread.sleep(100);
                    } while (now() < until);
                }
            }
            feeder.join(TimeUnit.SECONDS.toMillis(30));
            for (Instance instance : instances) {
                if (instance.stateDir != null) {
                    deleteTree(instance.stateDir);
                }
            }
        }
        if (feederError[0] != null) {
            throw new RuntimeException("feeder: " + feederError[0], feederError[0]);
        }
        Map<String, Object> produced = new LinkedHashMap<>();
        produced.put("step", "produce");
        produced.put("client_id", feederSettings.getProperty("client.id"));
        produced.put("topic", input);
        produced.put("compression", feederSettings.getProperty("compression.type", "none"));
        produced.put("acks", feederSettings.getProperty("acks"));
        produced.put("idempotent", true);
        produced.put("sent", sent.get());
        produced.put("acknowledged", acknowledged.get());
        synchronized (progress.offsets) {
            progress.offsets.values().forEach(list -> list.sort(null));
            produced.put("offsets", new TreeMap<>(progress.offsets));
        }
        produced.put("failures", failures);
        produced.put("seconds", seconds);
        produced.put("interval_ms", intervalMs);
        List<Object> described = new ArrayList<>();
        for (Instance instance : instances) {
            described.add(instance.result(application));
        }
        result.put("application_id", application);
        result.put("group_protocol", options.getOrDefault("group.protocol", "streams"));
        result.put("input", input);
        result.put("output", output);
        result.put("store", store);
        result.put("started_ms", started);
        result.put("all_processed_ms", doneAt < 0 ? null : doneAt);
        result.put("producer", produced);
        result.put("instances", described);
        result.put("elapsed_ms", now() - started);
        List<String> failed = new ArrayList<>();
        for (Instance instance : instances) {
            if (instance.error != null) {
                failed.add(instance.name + ": " + instance.error);
            }
        }
        if (doneAt < 0) {
            failed.add("not every record the feeder wrote was processed before the deadline");
        }
        if (!failed.isEmpty()) {
            throw new RuntimeException(String.join("; ", failed));
        }
    }

    private static void start(Instance instance, String bootstrap, Map<String, String> options, String application,
                              String input, String output, String store) throws Exception {
        Properties settings = new Properties();
        settings.put("application.id", application);
        settings.put("bootstrap.servers", bootstrap);
        settings.put("group.protocol", "streams");
        settings.put("commit.interval.ms", "1000");
        settings.put("num.stream.threads", "1");
        instance.stateDir = Files.createTempDirectory("kafkacap-streams-" + instance.name + "-");
        settings.put("state.dir", instance.stateDir.toString());
        options.forEach((key, value) -> {
            if (key.contains(".") && !key.startsWith("feeder.") && !key.equals("timeout.s")
                && !key.equals("client.id")) {
                settings.put(key, value);
            }
        });
        settings.put("client.id", instance.name);
        KafkaStreams streams = new KafkaStreams(topology(input, output, store, instance), settings);
        streams.setStateListener((now, before) -> {
            Map<String, Object> change = new LinkedHashMap<>();
            change.put("time_ms", now());
            change.put("from", before.toString());
            change.put("to", now.toString());
            instance.states.add(change);
        });
        streams.setUncaughtExceptionHandler(e -> {
            instance.error = e.toString();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                .SHUTDOWN_CLIENT;
        });
        instance.startedMs = now();
        streams.start();
        instance.streams = streams;
    }

    private static void deleteTree(Path root) {
        try (var paths = Files.walk(root)) {
            paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
        } catch (Exception e) {
            // a temporary folder; nothing to report
        }
    }
}
