import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.protocol.types.Schema;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java clients of the sample recordings: Kafka's own producer, consumer and admin client, run in steps.
 *
 * <pre>
 * java SampleClients protocol
 * java SampleClients BOOTSTRAP "STEP key=value ..." ["STEP key=value ..." ...]
 *   create-topics client.id=ID topics=A,B partitions=3
 *   produce       client.id=ID topic=A count=12 compression.type=gzip [keys=4]
 *   consume       client.id=ID group.id=G topics=A,B count=60 [timeout.s=30] [commit=true]
 *   create-topics ... [replicas=3] [min-isr=2]
 *   stream        client.id=ID topic=A seconds=30 interval_ms=80 consumer=ID2 group=G [timeout.s=60] [commit=true]
 *   group-configs client.id=ID group=G set=share.auto.offset.reset:earliest,share.record.lock.duration.ms:3000
 *   member-group  client.id=ID topic=A group=G members=M1,M2,M3 join_s=0,6,12 leave_s=-1,18,-1 seconds=24
 *                 interval_ms=150 [regex_member=M3 regex=RE2J] [commit_ms=2000] [timeout.s=60]
 *   share-group   client.id=ID topic=A group=G count=60 members=S1,S2,S3 [holder=S3 hold_ms=5000]
 *                 [commit_each=S1] [timeout.s=60]
 *   transactions  client.id=ID topics=A,B partitions=3 plan=commit:6,abort:4,ctp:6 [input=I group=G ctp=ID2]
 *                 [readers=ID3:read_committed:G3,ID4:read_uncommitted:G4]
 *   streams-group (StreamsApp.java, built with kafka-streams only for the scenarios that need it)
 * </pre>
 *
 * The steps of the modern group and transaction protocols ({@code member-group}: a KIP-848 group of consumers with
 * {@code group.protocol=consumer} joining and leaving on a schedule while a producer writes; {@code share-group}:
 * KIP-932 share consumers acknowledging explicitly; {@code transactions}: a transactional producer's committed and
 * aborted transactions, one consume-transform-produce, and readers at both isolation levels) log with the wall
 * clock ({@code time_ms}, ms since the epoch, the clock of the capture's timestamps) every rebalance callback with
 * the member id and epoch the consumer holds, every record and acknowledgement, every commit and its outcome.
 * Keys starting with {@code consumer.} go, without that prefix, to those steps' consumers only.
 *
 * {@code stream} runs a producer and a classic-group consumer at once (for a scenario that changes the cluster
 * under them): the producer sends one record every interval_ms for the given seconds, round-robin over the
 * partitions, while the consumer reads until it is past every offset the producer was acknowledged at. Keys
 * starting with {@code consumer.} go, without that prefix, to the consumer only.
 *
 * Every key with a dot is a client setting and goes to the client as it is (security.protocol, linger.ms, ...),
 * except jaas.username and jaas.password, which make the sasl.jaas.config of a SCRAM login (a setting with
 * spaces, which the step syntax cannot carry).
 * Each step prints one JSON line on stdout: what the client itself was told (acknowledged offsets, records
 * handed to the application, offsets committed), the truth the recording keeps. The requests are logged by the
 * clients' own NetworkClient at DEBUG on stderr through slf4j-simple ("Sending PRODUCE request with header
 * RequestHeader(...)", "Received PRODUCE response ..."), which the recorder parses; everything else logs at
 * WARN. {@code protocol} prints, for every API the client knows, its key, name and the response versions that
 * carry a top-level error_code, so the recorder reads error codes only where the wire has them, and the client's
 * names of the error codes.
 */
public final class SampleClients {
    private SampleClients() {
    }

    public static void main(String[] args) throws Exception {
        configureLogging();
        if (args.length == 1 && args[0].equals("protocol")) {
            System.out.println(json(protocol()));
            return;
        }
        if (args.length < 2) {
            System.err.println("usage: SampleClients protocol | SampleClients BOOTSTRAP STEP...");
            System.exit(2);
        }
        String bootstrap = args[0];
        int failed = 0;
        for (String text : Arrays.asList(args).subList(1, args.length)) {
            Step step = Step.parse(text);
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("step", step.command);
            result.put("client_id", step.get("client.id", null));
            try {
                switch (step.command) {
                    case "create-topics": createTopics(bootstrap, step, result); break;
                    case "produce": produce(bootstrap, step, result); break;
                    case "consume": consume(bootstrap, step, result); break;
                    case "stream": stream(bootstrap, step, result); break;
                    case "group-configs": groupConfigs(bootstrap, step, result); break;
                    case "member-group": memberGroup(bootstrap, step, result); break;
                    case "share-group": shareGroup(bootstrap, step, result); break;
                    case "transactions": transactions(bootstrap, step, result); break;
                    case "streams-group": streamsGroup(bootstrap, step, result); break;
                    default: throw new IllegalArgumentException("unknown step " + step.command);
                }
            } catch (Exception e) {
                result.put("error", e.toString());
                failed++;
            }
            System.out.println(json(result));
            System.out.flush();
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    /** slf4j-simple reads its settings when the first logger is made, so they are set before any client. */
    private static void configureLogging() {
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.log.org.apache.kafka.clients.NetworkClient", "debug");
        System.setProperty("org.slf4j.simpleLogger.showThreadName", "false");
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "false");
    }

    // -- steps ------------------------------------------------------------------------------------------
    private static final class Step {
        final String command;
        final Map<String, String> options = new LinkedHashMap<>();

        private Step(String command) {
            this.command = command;
        }

        static Step parse(String text) {
            String[] words = text.trim().split("\\s+");
            Step step = new Step(words[0]);
            for (String word : Arrays.asList(words).subList(1, words.length)) {
                int equals = word.indexOf('=');
                if (equals <= 0) {
                    throw new IllegalArgumentException("not key=value: " + word);
                }
                step.options.put(word.substring(0, equals), word.substring(equals + 1));
            }
            return step;
        }

        String get(String key, String fallback) {
            return options.getOrDefault(key, fallback);
        }

        int getInt(String key, int fallback) {
            return Integer.parseInt(get(key, Integer.toString(fallback)));
        }

        List<String> getList(String key) {
            return Arrays.asList(get(key, "").split(","));
        }

        /** The step's client settings (the keys with a dot) over the defaults given. */
        Properties client(String bootstrap, Map<String, Object> defaults) {
            Properties properties = new Properties();
            properties.putAll(defaults);
            properties.put("bootstrap.servers", bootstrap);
            options.forEach((key, value) -> {
                if (key.contains(".") && !key.equals("timeout.s") && !key.startsWith("jaas.")) {
                    properties.put(key, value);
                }
            });
            if (options.containsKey("jaas.username")) {
                properties.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    + "username=\"" + options.get("jaas.username") + "\" password=\"" + options.get("jaas.password")
                    + "\";");
            }
            return properties;
        }
    }

    private static void createTopics(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        List<String> topics = step.getList("topics");
        int partitions = step.getInt("partitions", 1);
        short replicas = (short) step.getInt("replicas", 1);
        String minIsr = step.get("min-isr", null);
        Map<String, Object> created = new LinkedHashMap<>();
        Map<String, Object> errors = new LinkedHashMap<>();
        try (Admin admin = Admin.create(step.client(bootstrap, Map.of()))) {
            List<NewTopic> wanted = new ArrayList<>();
            for (String topic : topics) {
                NewTopic newTopic = new NewTopic(topic, partitions, replicas);
                if (minIsr != null) {
                    newTopic.configs(Map.of("min.insync.replicas", minIsr));
                }
                wanted.add(newTopic);
            }
            CreateTopicsResult createResult = admin.createTopics(wanted);
            Map<String, ? extends Future<Void>> futures = createResult.values();
            Map<String, Object> topicIds = new LinkedHashMap<>();
            for (String topic : topics) {
                try {
                    futures.get(topic).get(30, TimeUnit.SECONDS);
                    created.put(topic, partitions);
                    topicIds.put(topic, createResult.topicId(topic).get(30, TimeUnit.SECONDS).toString());
                } catch (ExecutionException e) {
                    errors.put(topic, e.getCause().getClass().getSimpleName());
                }
            }
            result.put("topic_ids", topicIds);
            // Until every partition has a leader, so the producers' first requests find one.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            boolean led = false;
            while (!led && System.nanoTime() < deadline) {
                Map<String, TopicDescription> described;
                try {
                    described = admin.describeTopics(topics).allTopicNames().get(30, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    // in a cluster, the node asked may not have the new topic in its metadata yet
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                        throw e;
                    }
                    Thread.sleep(100);
                    continue;
                }
                led = true;
                for (TopicDescription description : described.values()) {
                    for (TopicPartitionInfo partition : description.partitions()) {
                        led &= partition.leader() != null && partition.leader().id() >= 0;
                        if (replicas > 1) {
                            led &= partition.isr().size() >= replicas;  // every replica in sync before acks=all
                        }
                    }
                }
                if (!led) {
                    Thread.sleep(100);
                }
            }
            result.put("leaders_ready", led);
        }
        result.put("created", created);
        result.put("errors", errors);
    }

    private static byte[] value(String topic, int index) {
        String note = "sample ".repeat(5);
        return ("{\"topic\": \"" + topic + "\", \"seq\": " + index + ", \"note\": \"" + note + "\"}")
            .getBytes(StandardCharsets.UTF_8);
    }

    private static void produce(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        String topic = step.get("topic", null);
        int count = step.getInt("count", 1);
        int keys = step.getInt("keys", 4);
        Map<String, Object> defaults = new LinkedHashMap<>();
        defaults.put("acks", "all");
        defaults.put("enable.idempotence", "true");
        defaults.put("linger.ms", "5");
        defaults.put("key.serializer", ByteArraySerializer.class.getName());
        defaults.put("value.serializer", ByteArraySerializer.class.getName());
        Properties settings = step.client(bootstrap, defaults);
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        Map<String, List<Long>> offsets = new TreeMap<>();
        int acknowledged = 0;
        List<String> failures = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(settings)) {
            for (int i = 0; i < count; i++) {
                byte[] key = ("key-" + (i % keys)).getBytes(StandardCharsets.UTF_8);
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, key, value(topic, i));
                record.headers().add("origin", "sample_pcaps".getBytes(StandardCharsets.UTF_8));
                futures.add(producer.send(record));
            }
            producer.flush();
            for (Future<RecordMetadata> future : futures) {
                try {
                    RecordMetadata metadata = future.get(30, TimeUnit.SECONDS);
                    offsets.computeIfAbsent(Integer.toString(metadata.partition()), p -> new ArrayList<>())
                        .add(metadata.offset());
                    acknowledged++;
                } catch (ExecutionException e) {
                    failures.add(e.getCause().toString());
                }
            }
        }
        result.put("topic", topic);
        result.put("compression", settings.getProperty("compression.type", "none"));
        result.put("acks", settings.getProperty("acks"));
        result.put("idempotent", Boolean.parseBoolean(settings.getProperty("enable.idempotence")));
        result.put("sent", count);
        result.put("acknowledged", acknowledged);
        result.put("offsets", offsets);
        result.put("failures", failures);
    }

    private static void consume(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        List<String> topics = step.getList("topics");
        int expected = step.getInt("count", 1);
        long timeoutMs = TimeUnit.SECONDS.toMillis(step.getInt("timeout.s", 30));
        boolean commit = Boolean.parseBoolean(step.get("commit", "true"));
        Map<String, Object> defaults = new LinkedHashMap<>();
        defaults.put("group.protocol", "classic");
        defaults.put("auto.offset.reset", "earliest");
        defaults.put("enable.auto.commit", "false");
        defaults.put("key.deserializer", ByteArrayDeserializer.class.getName());
        defaults.put("value.deserializer", ByteArrayDeserializer.class.getName());
        Properties settings = step.client(bootstrap, defaults);
        Map<String, Map<String, Integer>> consumed = new TreeMap<>();
        Map<TopicPartition, OffsetAndMetadata> next = new LinkedHashMap<>();
        int total = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(settings)) {
            consumer.subscribe(topics);
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (total < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    consumed.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                        .merge(Integer.toString(record.partition()), 1, Integer::sum);
                    next.put(new TopicPartition(record.topic(), record.partition()),
                        new OffsetAndMetadata(record.offset() + 1));
                    total++;
                }
            }
            if (commit && !next.isEmpty()) {
                consumer.commitSync(next);
            }
        }
        Map<String, Map<String, Long>> committed = new TreeMap<>();
        if (commit) {
            next.forEach((partition, offset) -> committed.computeIfAbsent(partition.topic(), t -> new TreeMap<>())
                .put(Integer.toString(partition.partition()), offset.offset()));
        }
        result.put("group_id", settings.getProperty("group.id"));
        result.put("group_protocol", settings.getProperty("group.protocol"));
        result.put("topics", topics);
        result.put("expected", expected);
        result.put("consumed", consumed);
        result.put("total", total);
        result.put("committed", committed);
        result.put("left", true);
    }

    /** Producer settings of a stream step: the defaults, then every dotted key but the consumer's. */
    private static Properties streamProducerSettings(String bootstrap, Step step) {
        Map<String, Object> defaults = new LinkedHashMap<>();
        defaults.put("acks", "all");
        defaults.put("enable.idempotence", "true");
        defaults.put("linger.ms", "5");
        defaults.put("key.serializer", ByteArraySerializer.class.getName());
        defaults.put("value.serializer", ByteArraySerializer.class.getName());
        Properties settings = step.client(bootstrap, defaults);
        settings.stringPropertyNames().stream().filter(key -> key.startsWith("consumer."))
            .forEach(settings::remove);
        return settings;
    }

    /** Consumer settings of a stream step: classic group, from the earliest offset, the consumer.* keys. */
    private static Properties streamConsumerSettings(String bootstrap, Step step, String clientId, String group) {
        Properties settings = new Properties();
        settings.put("group.protocol", "classic");
        settings.put("auto.offset.reset", "earliest");
        settings.put("enable.auto.commit", "false");
        settings.put("key.deserializer", ByteArrayDeserializer.class.getName());
        settings.put("value.deserializer", ByteArrayDeserializer.class.getName());
        step.options.forEach((key, value) -> {
            if (key.startsWith("consumer.")) {
                settings.put(key.substring("consumer.".length()), value);
            }
        });
        settings.put("bootstrap.servers", bootstrap);
        settings.put("client.id", clientId);
        settings.put("group.id", group);
        return settings;
    }

    /** Partition -> leader node id, as the client's metadata has it (-1 without a leader). */
    private static Map<String, Integer> leaders(List<PartitionInfo> partitions) {
        Map<String, Integer> leaders = new TreeMap<>();
        for (PartitionInfo partition : partitions) {
            leaders.put(Integer.toString(partition.partition()),
                partition.leader() == null || partition.leader().isEmpty() ? -1 : partition.leader().id());
        }
        return leaders;
    }

    /** The client's own counters of one metric group (and topic tag, when given), by metric name. */
    private static Map<String, Object> metrics(Map<MetricName, ? extends Metric> all, String group, String topic,
                                               List<String> names) {
        Map<String, Object> values = new TreeMap<>();
        all.forEach((name, metric) -> {
            boolean tagged = topic == null ? !name.tags().containsKey("topic") : topic.equals(name.tags().get("topic"));
            if (name.group().equals(group) && tagged && names.contains(name.name())) {
                Object value = metric.metricValue();
                if (value instanceof Double && ((Double) value) == Math.rint((Double) value)) {
                    value = ((Double) value).longValue();
                }
                values.put(name.name(), value);
            }
        });
        return values;
    }

    private static void stream(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        String topic = step.get("topic", null);
        long seconds = step.getInt("seconds", 20);
        long intervalMs = step.getInt("interval_ms", 100);
        String consumerId = step.get("consumer", topic + "-consumer");
        String group = step.get("group", topic + "-readers");
        long timeoutMs = TimeUnit.SECONDS.toMillis(step.getInt("timeout.s", 60));
        boolean commit = Boolean.parseBoolean(step.get("commit", "true"));
        Properties producerSettings = streamProducerSettings(bootstrap, step);
        Properties consumerSettings = streamConsumerSettings(bootstrap, step, consumerId, group);
        Map<String, List<Long>> offsets = new TreeMap<>();
        List<String> failures = new ArrayList<>();
        AtomicInteger sent = new AtomicInteger();
        AtomicInteger acknowledged = new AtomicInteger();
        AtomicReference<Throwable> producerError = new AtomicReference<>();
        Map<String, Object> producerResult = new LinkedHashMap<>();
        long started = System.currentTimeMillis();

        Thread producing = new Thread(() -> {
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerSettings)) {
                List<PartitionInfo> partitions = producer.partitionsFor(topic);
                producerResult.put("leaders_before", leaders(partitions));
                long deadline = started + TimeUnit.SECONDS.toMillis(seconds);
                long next = System.currentTimeMillis();
                for (int i = 0; System.currentTimeMillis() < deadline; i++) {
                    int partition = i % partitions.size();
                    byte[] key = ("key-" + partition).getBytes(StandardCharsets.UTF_8);
                    ProducerRecord<byte[], byte[]> record =
                        new ProducerRecord<>(topic, partition, key, value(topic, i));
                    record.headers().add("origin", "sample_pcaps".getBytes(StandardCharsets.UTF_8));
                    producer.send(record, (metadata, exception) -> {
                        synchronized (offsets) {
                            if (exception == null) {
                                offsets.computeIfAbsent(Integer.toString(metadata.partition()),
                                    p -> new ArrayList<>()).add(metadata.offset());
                                acknowledged.incrementAndGet();
                            } else {
                                failures.add(exception.toString());
                            }
                        }
                    });
                    sent.incrementAndGet();
                    next += intervalMs;
                    Thread.sleep(Math.max(0, next - System.currentTimeMillis()));
                }
                producer.flush();
                producerResult.put("leaders_after", leaders(producer.partitionsFor(topic)));
                Map<MetricName, ? extends Metric> all = producer.metrics();
                List<String> names = List.of("record-send-total", "record-retry-total", "record-error-total");
                producerResult.put("metrics", metrics(all, "producer-metrics", null, names));
                producerResult.put("topic_metrics", metrics(all, "producer-topic-metrics", topic, names));
            } catch (Throwable e) {
                producerError.set(e);
            }
        }, "stream-producer");

        Map<String, Map<String, Integer>> consumed = new TreeMap<>();
        Map<TopicPartition, OffsetAndMetadata> nextOffsets = new LinkedHashMap<>();
        Map<String, Object> consumerMetrics;
        int total = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerSettings)) {
            consumer.subscribe(List.of(topic));
            producing.start();
            long deadline = started + TimeUnit.SECONDS.toMillis(seconds) + timeoutMs;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    consumed.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                        .merge(Integer.toString(record.partition()), 1, Integer::sum);
                    nextOffsets.put(new TopicPartition(record.topic(), record.partition()),
                        new OffsetAndMetadata(record.offset() + 1));
                    total++;
                }
                if (!producing.isAlive() && caughtUp(topic, offsets, nextOffsets)) {
                    break;
                }
            }
            if (commit && !nextOffsets.isEmpty()) {
                consumer.commitSync(nextOffsets);
            }
            consumerMetrics = metrics(consumer.metrics(), "consumer-fetch-manager-metrics", null,
                List.of("records-consumed-total", "fetch-total"));
        }
        producing.join();
        if (producerError.get() != null) {
            throw new RuntimeException("producer: " + producerError.get(), producerError.get());
        }
        Map<String, Map<String, Long>> committed = new TreeMap<>();
        if (commit) {
            nextOffsets.forEach((partition, offset) -> committed
                .computeIfAbsent(partition.topic(), t -> new TreeMap<>())
                .put(Integer.toString(partition.partition()), offset.offset()));
        }
        Map<String, Object> produced = new LinkedHashMap<>();
        produced.put("step", "produce");
        produced.put("client_id", producerSettings.getProperty("client.id"));
        produced.put("topic", topic);
        produced.put("compression", producerSettings.getProperty("compression.type", "none"));
        produced.put("acks", producerSettings.getProperty("acks"));
        produced.put("idempotent", Boolean.parseBoolean(producerSettings.getProperty("enable.idempotence")));
        produced.put("seconds", seconds);
        produced.put("interval_ms", intervalMs);
        produced.put("sent", sent.get());
        produced.put("acknowledged", acknowledged.get());
        synchronized (offsets) {
            offsets.values().forEach(list -> list.sort(null));
            produced.put("offsets", offsets);
            produced.put("failures", failures);
        }
        produced.putAll(producerResult);
        Map<String, Object> read = new LinkedHashMap<>();
        read.put("step", "consume");
        read.put("client_id", consumerId);
        read.put("group_id", group);
        read.put("group_protocol", consumerSettings.getProperty("group.protocol"));
        read.put("topics", List.of(topic));
        read.put("expected", acknowledged.get());
        read.put("consumed", consumed);
        read.put("total", total);
        read.put("committed", committed);
        read.put("left", true);
        read.put("metrics", consumerMetrics);
        result.put("producer", produced);
        result.put("consumer", read);
        result.put("elapsed_ms", System.currentTimeMillis() - started);
    }

    /** Whether the consumer's next offset is past every offset the producer was acknowledged at. */
    private static boolean caughtUp(String topic, Map<String, List<Long>> offsets,
                                    Map<TopicPartition, OffsetAndMetadata> next) {
        synchronized (offsets) {
            for (Map.Entry<String, List<Long>> entry : offsets.entrySet()) {
                OffsetAndMetadata position = next.get(new TopicPartition(topic, Integer.parseInt(entry.getKey())));
                long last = entry.getValue().stream().mapToLong(Long::longValue).max().orElse(-1);
                if (position == null || position.offset() <= last) {
                    return false;
                }
            }
        }
        return true;
    }

    // -- the modern group and transaction protocols ---------------------------------------------------------
    private static long now() {
        return System.currentTimeMillis();
    }

    /** {topic: [partitions]} of a collection of partitions, sorted. */
    private static Map<String, List<Integer>> partitionsOf(Collection<TopicPartition> partitions) {
        Map<String, List<Integer>> out = new TreeMap<>();
        for (TopicPartition tp : partitions) {
            out.computeIfAbsent(tp.topic(), t -> new ArrayList<>()).add(tp.partition());
        }
        out.values().forEach(list -> list.sort(null));
        return out;
    }

    /** {topic: {partition: offset}} of offsets to commit. */
    private static Map<String, Map<String, Long>> offsetsOf(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Map<String, Long>> out = new TreeMap<>();
        offsets.forEach((tp, offset) -> out.computeIfAbsent(tp.topic(), t -> new TreeMap<>())
            .put(Integer.toString(tp.partition()), offset.offset()));
        return out;
    }

    /** Settings of a modern-protocol step's consumers: the defaults given, then the step's consumer.* keys. */
    private static Properties consumerSettings(String bootstrap, Step step, String clientId, String group,
                                               Map<String, Object> defaults) {
        Properties settings = new Properties();
        settings.putAll(defaults);
        settings.put("key.deserializer", ByteArrayDeserializer.class.getName());
        settings.put("value.deserializer", ByteArrayDeserializer.class.getName());
        step.options.forEach((key, value) -> {
            if (key.startsWith("consumer.")) {
                settings.put(key.substring("consumer.".length()), value);
            }
        });
        settings.put("bootstrap.servers", bootstrap);
        settings.put("client.id", clientId);
        if (group != null) {
            settings.put("group.id", group);
        }
        return settings;
    }

    /** A produce step's result for records sent by a step that does more than produce. */
    private static Map<String, Object> producedResult(Properties settings, String topic, int sent, int acknowledged,
                                                      Map<String, List<Long>> offsets, List<String> failures) {
        Map<String, Object> produced = new LinkedHashMap<>();
        produced.put("step", "produce");
        produced.put("client_id", settings.getProperty("client.id"));
        produced.put("topic", topic);
        produced.put("compression", settings.getProperty("compression.type", "none"));
        produced.put("acks", settings.getProperty("acks"));
        produced.put("idempotent", Boolean.parseBoolean(settings.getProperty("enable.idempotence")));
        produced.put("sent", sent);
        produced.put("acknowledged", acknowledged);
        synchronized (offsets) {
            offsets.values().forEach(list -> list.sort(null));
            produced.put("offsets", new TreeMap<>(offsets));
        }
        produced.put("failures", failures);
        return produced;
    }

    /** One record every intervalMs until started + seconds, round-robin over the topic's partitions. */
    private static Map<String, Object> produceFor(Properties settings, String topic, long started, long seconds,
                                                  long intervalMs, Map<String, List<Long>> offsets) throws Exception {
        List<String> failures = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger acknowledged = new AtomicInteger();
        int sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(settings)) {
            int partitions = producer.partitionsFor(topic).size();
            long deadline = started + TimeUnit.SECONDS.toMillis(seconds);
            long next = now();
            for (int i = 0; now() < deadline; i++) {
                int partition = i % partitions;
                byte[] key = ("key-" + partition).getBytes(StandardCharsets.UTF_8);
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, partition, key, value(topic, i));
                record.headers().add("origin", "sample_pcaps".getBytes(StandardCharsets.UTF_8));
                producer.send(record, (metadata, exception) -> {
                    synchronized (offsets) {
                        if (exception == null) {
                            offsets.computeIfAbsent(Integer.toString(metadata.partition()), p -> new ArrayList<>())
                                .add(metadata.offset());
                            acknowledged.incrementAndGet();
                        } else {
                            failures.add(exception.toString());
                        }
                    }
                });
                sent++;
                next += intervalMs;
                Thread.sleep(Math.max(0, next - now()));
            }
            producer.flush();
        }
        Map<String, Object> produced = producedResult(settings, topic, sent, acknowledged.get(), offsets, failures);
        produced.put("seconds", seconds);
        produced.put("interval_ms", intervalMs);
        return produced;
    }

    /** count records, round-robin over the topic's partitions, acknowledged before this returns. */
    private static Map<String, Object> produceCount(Properties settings, String topic, int count) throws Exception {
        Map<String, List<Long>> offsets = new TreeMap<>();
        List<String> failures = new ArrayList<>();
        int acknowledged = 0;
        long started = now();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(settings)) {
            int partitions = producer.partitionsFor(topic).size();
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                int partition = i % partitions;
                byte[] key = ("key-" + partition).getBytes(StandardCharsets.UTF_8);
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, partition, key, value(topic, i));
                record.headers().add("origin", "sample_pcaps".getBytes(StandardCharsets.UTF_8));
                futures.add(producer.send(record));
            }
            producer.flush();
            for (Future<RecordMetadata> future : futures) {
                try {
                    RecordMetadata metadata = future.get(30, TimeUnit.SECONDS);
                    offsets.computeIfAbsent(Integer.toString(metadata.partition()), p -> new ArrayList<>())
                        .add(metadata.offset());
                    acknowledged++;
                } catch (ExecutionException e) {
                    failures.add(e.getCause().toString());
                }
            }
        }
        Map<String, Object> produced = producedResult(settings, topic, count, acknowledged, offsets, failures);
        produced.put("started_ms", started);
        produced.put("ended_ms", now());
        return produced;
    }

    /** Group configs (KIP-848/932/1071 group-level settings) set with IncrementalAlterConfigs, then read back. */
    private static void groupConfigs(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        String group = step.get("group", null);
        Map<String, String> wanted = new LinkedHashMap<>();
        for (String pair : step.getList("set")) {
            int colon = pair.indexOf(':');
            wanted.put(pair.substring(0, colon), pair.substring(colon + 1));
        }
        // Type.GROUP (KIP-848 group configs) is newer than some releases this file is compiled against
        ConfigResource resource = new ConfigResource(ConfigResource.Type.valueOf("GROUP"), group);
        List<AlterConfigOp> ops = new ArrayList<>();
        wanted.forEach((name, value) -> ops.add(new AlterConfigOp(new ConfigEntry(name, value),
            AlterConfigOp.OpType.SET)));
        Map<String, Object> described = new TreeMap<>();
        try (Admin admin = Admin.create(step.client(bootstrap, Map.of()))) {
            result.put("started_ms", now());
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get(30, TimeUnit.SECONDS);
            result.put("altered_ms", now());
            Config config = admin.describeConfigs(List.of(resource)).all().get(30, TimeUnit.SECONDS).get(resource);
            for (ConfigEntry entry : config.entries()) {
                if (wanted.containsKey(entry.name())) {
                    described.put(entry.name(), entry.value());
                }
            }
        }
        result.put("group_id", group);
        result.put("set", wanted);
        result.put("described", described);
    }

    /** consumer.subscribe(new SubscriptionPattern(regex), listener): the broker-side (RE2J) regex subscription of
     *  KIP-848, reached by name because the class is newer than some releases this file is compiled against. */
    private static void subscribePattern(KafkaConsumer<byte[], byte[]> consumer, String regex,
                                         ConsumerRebalanceListener listener) throws Exception {
        Class<?> pattern = Class.forName("org.apache.kafka.clients.consumer.SubscriptionPattern");
        Object subscription = pattern.getConstructor(String.class).newInstance(regex);
        KafkaConsumer.class.getMethod("subscribe", pattern, ConsumerRebalanceListener.class)
            .invoke(consumer, subscription, listener);
    }

    /** A share consumer's record's delivery count (ConsumerRecord.deliveryCount(), Kafka 4.0 on), or null. */
    private static Integer deliveryCount(ConsumerRecord<?, ?> record) {
        try {
            Object count = ConsumerRecord.class.getMethod("deliveryCount").invoke(record);
            return ((Optional<?>) count).map(c -> ((Number) c).intValue()).orElse(null);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    /** What the members of a member-group step share: the producer's acknowledged offsets, the furthest any
     *  member read in each partition, and whether the producer is done. */
    private static final class GroupProgress {
        final String topic;
        final Map<String, List<Long>> offsets = new TreeMap<>();
        final Map<Integer, Long> read = new HashMap<>();
        volatile boolean producerDone;

        GroupProgress(String topic) {
            this.topic = topic;
        }

        synchronized void read(int partition, long next) {
            read.merge(partition, next, Math::max);
        }

        /** The producer is done and some member read past every offset it was acknowledged at. */
        boolean allRead() {
            if (!producerDone) {
                return false;
            }
            synchronized (offsets) {
                for (Map.Entry<String, List<Long>> entry : offsets.entrySet()) {
                    long last = entry.getValue().stream().mapToLong(Long::longValue).max().orElse(-1);
                    Long position;
                    synchronized (this) {
                        position = read.get(Integer.parseInt(entry.getKey()));
                    }
                    if (position == null || position <= last) {
                        return false;
                    }
                }
            }
            return true;
        }
    }

    /** One member of a member-group step: a KafkaConsumer in a thread of its own, from join to close. */
    private static final class Member implements Runnable {
        final String clientId;
        final Properties settings;
        final String topic;
        final String regex;
        final long joinAt;
        final long leaveAt;  // -1: stays until everything was read
        final long commitMs;
        final long deadline;
        final GroupProgress progress;
        final List<Map<String, Object>> events = Collections.synchronizedList(new ArrayList<>());
        final List<Map<String, Object>> commits = Collections.synchronizedList(new ArrayList<>());
        final Map<String, Map<String, Integer>> consumed = new TreeMap<>();
        final Map<TopicPartition, Long> positions = new HashMap<>();
        final Map<TopicPartition, Long> lastCommitted = new HashMap<>();
        final Set<TopicPartition> owned = new TreeSet<>((a, b) -> a.topic().equals(b.topic())
            ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
        int total;
        String memberId;
        String error;
        Thread thread;

        Member(String clientId, Properties settings, String topic, String regex, long joinAt, long leaveAt,
               long commitMs, long deadline, GroupProgress progress) {
            this.clientId = clientId;
            this.settings = settings;
            this.topic = topic;
            this.regex = regex;
            this.joinAt = joinAt;
            this.leaveAt = leaveAt;
            this.commitMs = commitMs;
            this.deadline = deadline;
            this.progress = progress;
        }

        private void event(KafkaConsumer<byte[], byte[]> consumer, String kind, Collection<TopicPartition> partitions) {
            Map<String, Object> event = new LinkedHashMap<>();
            event.put("event", kind);
            event.put("time_ms", now());
            if (partitions != null) {
                event.put("partitions", partitionsOf(partitions));
            }
            if (consumer != null) {
                try {
                    ConsumerGroupMetadata metadata = consumer.groupMetadata();
                    event.put("member_id", metadata.memberId());
                    event.put("member_epoch", metadata.generationId());
                    if (!metadata.memberId().isEmpty()) {
                        memberId = metadata.memberId();
                    }
                } catch (RuntimeException e) {
                    event.put("member_id", null);
                }
            }
            event.put("owned_after", partitionsOf(owned));
            events.add(event);
        }

        /** commitSync of the positions of these partitions that moved since their last commit; logged. */
        private void commit(KafkaConsumer<byte[], byte[]> consumer, Collection<TopicPartition> partitions,
                            String reason) {
            Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
            for (TopicPartition tp : partitions) {
                Long position = positions.get(tp);
                if (position != null && !position.equals(lastCommitted.get(tp))) {
                    offsets.put(tp, new OffsetAndMetadata(position));
                }
            }
            if (offsets.isEmpty()) {
                return;
            }
            Map<String, Object> commit = new LinkedHashMap<>();
            commit.put("time_ms", now());
            commit.put("reason", reason);
            commit.put("offsets", offsetsOf(offsets));
            ConsumerGroupMetadata metadata = consumer.groupMetadata();
            commit.put("member_epoch", metadata.generationId());
            try {
                consumer.commitSync(offsets, Duration.ofSeconds(10));
                offsets.forEach((tp, offset) -> lastCommitted.put(tp, offset.offset()));
                commit.put("error", null);
            } catch (RuntimeException e) {
                commit.put("error", e.toString());
            }
            commit.put("done_ms", now());
            commits.add(commit);
        }

        @Override
        public void run() {
            try {
                Thread.sleep(Math.max(0, joinAt - now()));
                try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(settings)) {
                    ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                        @Override
                        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                            commit(consumer, partitions, "revoked");
                            owned.removeAll(partitions);
                            event(consumer, "revoked", partitions);
                            partitions.forEach(positions::remove);
                        }

                        @Override
                        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                            owned.addAll(partitions);
                            event(consumer, "assigned", partitions);
                        }

                        @Override
                        public void onPartitionsLost(Collection<TopicPartition> partitions) {
                            owned.removeAll(partitions);
                            event(consumer, "lost", partitions);
                            partitions.forEach(positions::remove);
                        }
                    };
                    Map<String, Object> subscribed = new LinkedHashMap<>();
                    if (regex != null) {
                        subscribePattern(consumer, regex, listener);
                    } else {
                        consumer.subscribe(List.of(topic), listener);
                    }
                    event(consumer, "subscribed", null);
                    long lastCommit = now();
                    while (now() < deadline && (leaveAt < 0 || now() < leaveAt)) {
                        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<byte[], byte[]> record : records) {
                            consumed.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                                .merge(Integer.toString(record.partition()), 1, Integer::sum);
                            positions.put(new TopicPartition(record.topic(), record.partition()), record.offset() + 1);
                            progress.read(record.partition(), record.offset() + 1);
                            total++;
                        }
                        if (now() - lastCommit >= commitMs) {
                            commit(consumer, new ArrayList<>(owned), "periodic");
                            lastCommit = now();
                        }
                        if (leaveAt < 0 && progress.allRead()) {
                            break;
                        }
                    }
                    commit(consumer, new ArrayList<>(owned), "before-close");
                    event(consumer, "closing", null);
                }
                event(null, "closed", null);
            } catch (Exception e) {
                error = e.toString();
            }
        }

        Map<String, Object> result(String group) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("step", "consume");
            out.put("client_id", clientId);
            out.put("group_id", group);
            out.put("group_protocol", settings.getProperty("group.protocol"));
            Map<String, Object> subscription = new LinkedHashMap<>();
            if (regex != null) {
                subscription.put("pattern", regex);
            } else {
                subscription.put("topics", List.of(topic));
            }
            out.put("subscription", subscription);
            out.put("topics", List.of(topic));
            out.put("join_ms", joinAt);
            out.put("leave_ms", leaveAt < 0 ? null : leaveAt);
            out.put("member_id", memberId);
            out.put("events", new ArrayList<>(events));
            out.put("commits", new ArrayList<>(commits));
            out.put("consumed", consumed);
            out.put("total", total);
            Map<String, Map<String, Long>> committed = new TreeMap<>();
            lastCommitted.forEach((tp, offset) -> committed.computeIfAbsent(tp.topic(), t -> new TreeMap<>())
                .put(Integer.toString(tp.partition()), offset));
            out.put("committed", committed);
            out.put("left", error == null);
            out.put("expected", total);
            if (error != null) {
                out.put("member_error", error);
            }
            return out;
        }
    }

    private static List<Long> secondsList(Step step, String key, int size) {
        List<Long> values = new ArrayList<>();
        for (String text : step.getList(key)) {
            if (!text.isEmpty()) {
                values.add(Long.parseLong(text));
            }
        }
        while (values.size() < size) {
            values.add(-1L);
        }
        return values;
    }

    /** A KIP-848 consumer group (group.protocol=consumer) whose members join and leave on a schedule while a
     *  producer writes one record every interval_ms. */
    private static void memberGroup(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        String topic = step.get("topic", null);
        String group = step.get("group", null);
        List<String> names = step.getList("members");
        List<Long> joins = secondsList(step, "join_s", names.size());
        List<Long> leaves = secondsList(step, "leave_s", names.size());
        long seconds = step.getInt("seconds", 24);
        long intervalMs = step.getInt("interval_ms", 150);
        long commitMs = step.getInt("commit_ms", 2000);
        String regexMember = step.get("regex_member", null);
        String regex = step.get("regex", null);
        long started = now();
        long deadline = started + TimeUnit.SECONDS.toMillis(seconds + step.getInt("timeout.s", 60));
        GroupProgress progress = new GroupProgress(topic);
        Properties producerSettings = streamProducerSettings(bootstrap, step);
        Map<String, Object> defaults = new LinkedHashMap<>();
        defaults.put("group.protocol", "consumer");
        defaults.put("auto.offset.reset", "earliest");
        defaults.put("enable.auto.commit", "false");
        List<Member> members = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            String name = names.get(i);
            long leave = leaves.get(i) < 0 ? -1 : started + TimeUnit.SECONDS.toMillis(leaves.get(i));
            Member member = new Member(name, consumerSettings(bootstrap, step, name, group, defaults), topic,
                name.equals(regexMember) ? regex : null, started + TimeUnit.SECONDS.toMillis(joins.get(i)), leave,
                commitMs, deadline, progress);
            member.thread = new Thread(member, name);
            member.thread.start();
            members.add(member);
        }
        Map<String, Object> produced;
        try {
            produced = produceFor(producerSettings, topic, started, seconds, intervalMs, progress.offsets);
        } finally {
            progress.producerDone = true;
        }
        List<Map<String, Object>> memberResults = new ArrayList<>();
        for (Member member : members) {
            member.thread.join(TimeUnit.SECONDS.toMillis(seconds + 90));
            memberResults.add(member.result(group));
        }
        result.put("group_id", group);
        result.put("started_ms", started);
        result.put("producer", produced);
        result.put("members", memberResults);
        result.put("elapsed_ms", now() - started);
        List<String> failed = new ArrayList<>();
        for (Member member : members) {
            if (member.error != null) {
                failed.add(member.clientId + ": " + member.error);
            }
        }
        if (!failed.isEmpty()) {
            throw new RuntimeException("members failed: " + failed);
        }
    }

    /** What a share consumer was handed and what it said about each record. */
    private static final class ShareMember implements Runnable {
        final String clientId;
        final Properties settings;
        final String topic;
        final boolean holder;
        final long holdMs;
        final boolean commitEach;
        final long deadline;
        final ShareProgress progress;
        final List<Map<String, Object>> records = Collections.synchronizedList(new ArrayList<>());
        final List<Map<String, Object>> acknowledgements = Collections.synchronizedList(new ArrayList<>());
        final List<Map<String, Object>> commits = Collections.synchronizedList(new ArrayList<>());
        final List<Map<String, Object>> callbacks = Collections.synchronizedList(new ArrayList<>());
        final List<Map<String, Object>> events = Collections.synchronizedList(new ArrayList<>());
        final Map<String, Map<String, Integer>> consumed = new TreeMap<>();
        int total;
        String error;
        Thread thread;

        ShareMember(String clientId, Properties settings, String topic, boolean holder, long holdMs,
                    boolean commitEach, long deadline, ShareProgress progress) {
            this.clientId = clientId;
            this.settings = settings;
            this.topic = topic;
            this.holder = holder;
            this.holdMs = holdMs;
            this.commitEach = commitEach;
            this.deadline = deadline;
            this.progress = progress;
        }

        private void event(String kind) {
            Map<String, Object> event = new LinkedHashMap<>();
            event.put("event", kind);
            event.put("time_ms", now());
            events.add(event);
        }

        private static Map<String, Object> byPartition(Map<TopicIdPartition, ?> values) {
            Map<String, Object> out = new TreeMap<>();
            values.forEach((tip, value) -> {
                Object shown = value;
                if (value instanceof Optional) {
                    shown = ((Optional<?>) value).map(Object::toString).orElse(null);
                } else if (value instanceof Set) {
                    List<Long> sorted = new ArrayList<>();
                    for (Object o : (Set<?>) value) {
                        sorted.add((Long) o);
                    }
                    sorted.sort(null);
                    shown = sorted;
                }
                out.put(tip.topic() + "-" + tip.partition(), shown);
            });
            return out;
        }

        private void commitSync(KafkaShareConsumer<byte[], byte[]> consumer, String reason) {
            Map<String, Object> commit = new LinkedHashMap<>();
            commit.put("time_ms", now());
            commit.put("reason", reason);
            try {
                Map<TopicIdPartition, Optional<org.apache.kafka.common.KafkaException>> outcome =
                    consumer.commitSync(Duration.ofSeconds(10));
                commit.put("results", byPartition(outcome));
            } catch (RuntimeException e) {
                commit.put("error", e.toString());
            }
            commit.put("done_ms", now());
            commits.add(commit);
        }

        /** ACCEPT, except: a first delivery at an offset ending in 3 is RELEASEd (delivered again, with delivery
         *  count 2), and an offset ending in 7 is REJECTed. */
        static AcknowledgeType decide(long offset, int deliveryCount) {
            if (offset % 10 == 7) {
                return AcknowledgeType.REJECT;
            }
            if (offset % 10 == 3 && deliveryCount <= 1) {
                return AcknowledgeType.RELEASE;
            }
            return AcknowledgeType.ACCEPT;
        }

        @Override
        public void run() {
            try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(settings)) {
                consumer.setAcknowledgementCommitCallback((offsets, exception) -> {
                    Map<String, Object> callback = new LinkedHashMap<>();
                    callback.put("time_ms", now());
                    callback.put("offsets", byPartition(offsets));
                    callback.put("error", exception == null ? null : exception.toString());
                    callbacks.add(callback);
                });
                consumer.subscribe(List.of(topic));
                event("subscribed");
                if (holder) {
                    ConsumerRecords<byte[], byte[]> batch = ConsumerRecords.empty();
                    while (batch.isEmpty() && now() < deadline) {
                        batch = consumer.poll(Duration.ofMillis(500));
                    }
                    for (ConsumerRecord<byte[], byte[]> record : batch) {
                        received(record, null);
                    }
                    progress.held.countDown();
                    event("holding");
                    Thread.sleep(holdMs);  // past the acquisition lock: the broker hands the records to others
                    event("closing-unacknowledged");
                } else {
                    progress.held.await(30, TimeUnit.SECONDS);
                    while (now() < deadline && !progress.done()) {
                        ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
                        for (ConsumerRecord<byte[], byte[]> record : batch) {
                            Integer delivered = deliveryCount(record);
                            int count = delivered == null ? -1 : delivered;
                            AcknowledgeType type = decide(record.offset(), count);
                            received(record, type);
                            consumer.acknowledge(record, type);
                            Map<String, Object> ack = new LinkedHashMap<>();
                            ack.put("time_ms", now());
                            ack.put("topic", record.topic());
                            ack.put("partition", record.partition());
                            ack.put("offset", record.offset());
                            ack.put("type", type.toString());
                            acknowledgements.add(ack);
                            progress.acknowledged(record.partition(), record.offset(), type);
                        }
                        if (commitEach && !batch.isEmpty()) {
                            commitSync(consumer, "after-batch");
                        }
                    }
                    commitSync(consumer, "before-close");
                    event("closing");
                }
            } catch (Exception e) {
                error = e.toString();
                progress.held.countDown();
            }
            event("closed");
        }

        private void received(ConsumerRecord<byte[], byte[]> record, AcknowledgeType type) {
            Map<String, Object> seen = new LinkedHashMap<>();
            seen.put("time_ms", now());
            seen.put("topic", record.topic());
            seen.put("partition", record.partition());
            seen.put("offset", record.offset());
            seen.put("delivery_count", deliveryCount(record));
            seen.put("acknowledged", type == null ? null : type.toString());
            records.add(seen);
            consumed.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                .merge(Integer.toString(record.partition()), 1, Integer::sum);
            total++;
        }

        Map<String, Object> result(String group) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("client_id", clientId);
            out.put("group_id", group);
            out.put("holder", holder);
            out.put("commit_each_batch", commitEach);
            out.put("settings", Map.of("share.acknowledgement.mode", settings.getProperty("share.acknowledgement.mode"),
                "max.poll.records", settings.getProperty("max.poll.records", "500"),
                "share.acquire.mode", settings.getProperty("share.acquire.mode", "batch_optimized")));
            out.put("events", new ArrayList<>(events));
            out.put("records", new ArrayList<>(records));
            out.put("acknowledgements", new ArrayList<>(acknowledgements));
            out.put("commits", new ArrayList<>(commits));
            out.put("callbacks", new ArrayList<>(callbacks));
            out.put("consumed", consumed);
            out.put("total", total);
            if (error != null) {
                out.put("member_error", error);
            }
            return out;
        }
    }

    /** The records of a share-group step that reached a final state (ACCEPTed or REJECTed). */
    private static final class ShareProgress {
        final int expected;
        final CountDownLatch held;
        final Map<String, String> finals = new HashMap<>();

        ShareProgress(int expected, boolean holder) {
            this.expected = expected;
            this.held = new CountDownLatch(holder ? 1 : 0);
        }

        synchronized void acknowledged(int partition, long offset, AcknowledgeType type) {
            if (type != AcknowledgeType.RELEASE) {
                finals.put(partition + ":" + offset, type.toString());
            }
        }

        synchronized boolean done() {
            return finals.size() >= expected;
        }
    }

    /** KIP-932 share consumers (KafkaShareConsumer, explicit acknowledgement) on records written beforehand. */
    private static void shareGroup(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        String topic = step.get("topic", null);
        String group = step.get("group", null);
        int count = step.getInt("count", 60);
        List<String> names = step.getList("members");
        String holder = step.get("holder", null);
        long holdMs = step.getInt("hold_ms", 5000);
        List<String> commitEach = step.getList("commit_each");
        long started = now();
        long deadline = started + TimeUnit.SECONDS.toMillis(step.getInt("timeout.s", 60));
        Map<String, Object> produced = produceCount(streamProducerSettings(bootstrap, step), topic, count);
        Map<String, Object> defaults = new LinkedHashMap<>();
        defaults.put("share.acknowledgement.mode", "explicit");
        ShareProgress progress = new ShareProgress(count, holder != null);
        List<ShareMember> members = new ArrayList<>();
        for (String name : names) {
            ShareMember member = new ShareMember(name, consumerSettings(bootstrap, step, name, group, defaults), topic,
                name.equals(holder), holdMs, commitEach.contains(name), deadline, progress);
            member.thread = new Thread(member, name);
            members.add(member);
        }
        for (ShareMember member : members) {  // the holder first: it takes the first records and sits on them
            if (member.holder) {
                member.thread.start();
                progress.held.await(30, TimeUnit.SECONDS);
            }
        }
        for (ShareMember member : members) {
            if (!member.holder) {
                member.thread.start();
            }
        }
        List<Map<String, Object>> memberResults = new ArrayList<>();
        List<String> failed = new ArrayList<>();
        for (ShareMember member : members) {
            member.thread.join(TimeUnit.SECONDS.toMillis(120));
            memberResults.add(member.result(group));
            if (member.error != null) {
                failed.add(member.clientId + ": " + member.error);
            }
        }
        result.put("group_id", group);
        result.put("started_ms", started);
        result.put("producer", produced);
        result.put("members", memberResults);
        synchronized (progress) {
            result.put("final_states", new TreeMap<>(progress.finals));
        }
        result.put("elapsed_ms", now() - started);
        if (!failed.isEmpty()) {
            throw new RuntimeException("share consumers failed: " + failed);
        }
    }

    /** A consumer reading topics to their end (the last stable offset for read_committed), then committing. */
    private static Map<String, Object> readToEnd(String bootstrap, Step step, String clientId, String group,
                                                 String isolation, List<String> topics, int partitions)
        throws Exception {
        Map<String, Object> defaults = new LinkedHashMap<>();
        defaults.put("group.protocol", "consumer");
        defaults.put("auto.offset.reset", "earliest");
        defaults.put("enable.auto.commit", "false");
        defaults.put("isolation.level", isolation);
        Properties settings = consumerSettings(bootstrap, step, clientId, group, defaults);
        Map<String, Map<String, Integer>> consumed = new TreeMap<>();
        Map<String, Map<String, List<Long>>> seen = new TreeMap<>();
        Map<TopicPartition, OffsetAndMetadata> positions = new LinkedHashMap<>();
        Map<String, Object> out = new LinkedHashMap<>();
        int total = 0;
        long started = now();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(settings)) {
            consumer.subscribe(topics);
            long deadline = now() + TimeUnit.SECONDS.toMillis(step.getInt("timeout.s", 30));
            boolean atEnd = false;
            while (!atEnd && now() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(300))) {
                    consumed.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                        .merge(Integer.toString(record.partition()), 1, Integer::sum);
                    seen.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                        .computeIfAbsent(Integer.toString(record.partition()), p -> new ArrayList<>()).add(record.offset());
                    total++;
                }
                Set<TopicPartition> assigned = consumer.assignment();
                if (assigned.size() == topics.size() * partitions) {
                    Map<TopicPartition, Long> ends = consumer.endOffsets(assigned, Duration.ofSeconds(10));
                    atEnd = true;
                    for (TopicPartition tp : assigned) {
                        atEnd &= consumer.position(tp, Duration.ofSeconds(10)) >= ends.get(tp);
                    }
                    if (atEnd) {
                        out.put("end_offsets", offsetsOf(ends.entrySet().stream().collect(
                            java.util.stream.Collectors.toMap(Map.Entry::getKey, e -> new OffsetAndMetadata(e.getValue())))));
                        for (TopicPartition tp : assigned) {
                            positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                        }
                    }
                }
            }
            consumer.commitSync(positions, Duration.ofSeconds(10));
            out.put("committed_ms", now());
        }
        out.put("step", "consume");
        out.put("client_id", clientId);
        out.put("group_id", group);
        out.put("group_protocol", "consumer");
        out.put("isolation_level", isolation);
        out.put("topics", topics);
        out.put("started_ms", started);
        out.put("closed_ms", now());
        out.put("consumed", consumed);
        out.put("offsets_seen", seen);
        out.put("total", total);
        out.put("expected", total);
        out.put("committed", offsetsOf(positions));
        out.put("left", true);
        return out;
    }

    /** A transactional producer runs the plan's transactions (commit:N, abort:N, ctp:N consume-transform-produce
     *  with sendOffsetsToTransaction), then readers at both isolation levels read the topics to their end. */
    private static void transactions(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        List<String> topics = step.getList("topics");
        int partitions = step.getInt("partitions", 3);
        String input = step.get("input", null);
        String group = step.get("group", null);
        String ctpId = step.get("ctp", null);
        Properties settings = streamProducerSettings(bootstrap, step);
        List<Map<String, Object>> transactions = new ArrayList<>();
        Map<String, Object> ctpResult = null;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(settings)) {
            Map<String, Object> init = new LinkedHashMap<>();
            init.put("started_ms", now());
            producer.initTransactions();
            init.put("ended_ms", now());
            result.put("init_transactions", init);
            int sequence = 0;
            for (String item : step.getList("plan")) {
                String[] parts = item.split(":");
                String kind = parts[0];
                int n = Integer.parseInt(parts[1]);
                Map<String, Object> tx = new LinkedHashMap<>();
                tx.put("index", transactions.size());
                tx.put("kind", kind);
                KafkaConsumer<byte[], byte[]> consumer = null;
                List<ConsumerRecord<byte[], byte[]>> inputs = new ArrayList<>();
                Map<TopicPartition, OffsetAndMetadata> next = new LinkedHashMap<>();
                if (kind.equals("ctp")) {
                    Map<String, Object> defaults = new LinkedHashMap<>();
                    defaults.put("group.protocol", "consumer");
                    defaults.put("auto.offset.reset", "earliest");
                    defaults.put("enable.auto.commit", "false");
                    defaults.put("isolation.level", "read_committed");
                    consumer = new KafkaConsumer<>(consumerSettings(bootstrap, step, ctpId, group, defaults));
                    consumer.subscribe(List.of(input));
                    long deadline = now() + TimeUnit.SECONDS.toMillis(30);
                    while (inputs.size() < n && now() < deadline) {
                        for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(300))) {
                            inputs.add(record);
                            next.put(new TopicPartition(record.topic(), record.partition()),
                                new OffsetAndMetadata(record.offset() + 1));
                        }
                    }
                    tx.put("input_read_ms", now());
                }
                tx.put("begin_ms", now());
                producer.beginTransaction();
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                int count = kind.equals("ctp") ? inputs.size() : n;
                for (int i = 0; i < count; i++) {
                    String topic = kind.equals("ctp") ? topics.get(topics.size() - 1) : topics.get(i % topics.size());
                    int partition = kind.equals("ctp") ? inputs.get(i).partition() % partitions
                        : (i / topics.size()) % partitions;
                    byte[] key = ("tx-" + transactions.size() + "-" + i).getBytes(StandardCharsets.UTF_8);
                    byte[] payload = kind.equals("ctp")
                        ? ("transformed " + new String(inputs.get(i).value(), StandardCharsets.UTF_8))
                            .getBytes(StandardCharsets.UTF_8)
                        : value(topic, sequence++);
                    ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, partition, key, payload);
                    record.headers().add("origin", "sample_pcaps".getBytes(StandardCharsets.UTF_8));
                    futures.add(producer.send(record));
                }
                producer.flush();
                Map<String, Map<String, List<Long>>> written = new TreeMap<>();
                for (Future<RecordMetadata> future : futures) {
                    RecordMetadata metadata = future.get(30, TimeUnit.SECONDS);
                    written.computeIfAbsent(metadata.topic(), t -> new TreeMap<>())
                        .computeIfAbsent(Integer.toString(metadata.partition()), p -> new ArrayList<>())
                        .add(metadata.offset());
                }
                tx.put("records", written);
                tx.put("record_count", futures.size());
                if (consumer != null) {
                    ConsumerGroupMetadata metadata = consumer.groupMetadata();
                    tx.put("offsets_sent_ms", now());
                    producer.sendOffsetsToTransaction(next, metadata);
                    Map<String, Object> sent = new LinkedHashMap<>();
                    sent.put("group_id", metadata.groupId());
                    sent.put("member_id", metadata.memberId());
                    sent.put("member_epoch", metadata.generationId());
                    sent.put("offsets", offsetsOf(next));
                    tx.put("offsets_to_transaction", sent);
                }
                tx.put("end_ms_requested", now());
                if (kind.equals("abort")) {
                    producer.abortTransaction();
                    tx.put("outcome", "aborted");
                } else {
                    producer.commitTransaction();
                    tx.put("outcome", "committed");
                }
                tx.put("end_ms", now());
                if (consumer != null) {
                    Map<String, Map<String, Integer>> read = new TreeMap<>();
                    for (ConsumerRecord<byte[], byte[]> record : inputs) {
                        read.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                            .merge(Integer.toString(record.partition()), 1, Integer::sum);
                    }
                    ConsumerGroupMetadata metadata = consumer.groupMetadata();
                    consumer.close();
                    ctpResult = new LinkedHashMap<>();
                    ctpResult.put("step", "consume");
                    ctpResult.put("client_id", ctpId);
                    ctpResult.put("group_id", group);
                    ctpResult.put("group_protocol", "consumer");
                    ctpResult.put("isolation_level", "read_committed");
                    ctpResult.put("member_id", metadata.memberId());
                    ctpResult.put("topics", List.of(input));
                    ctpResult.put("consumed", read);
                    ctpResult.put("total", inputs.size());
                    ctpResult.put("expected", n);
                    ctpResult.put("committed", Map.of());  // committed by the producer, inside the transaction
                    ctpResult.put("left", true);
                    ctpResult.put("closed_ms", now());
                }
                transactions.add(tx);
            }
        }
        result.put("transactional_id", settings.getProperty("transactional.id"));
        result.put("topics", topics);
        result.put("transactions", transactions);
        result.put("ctp_consumer", ctpResult);
        List<Map<String, Object>> readers = new ArrayList<>();
        for (String spec : step.getList("readers")) {
            if (spec.isEmpty()) {
                continue;
            }
            String[] parts = spec.split(":");
            readers.add(readToEnd(bootstrap, step, parts[0], parts[2], parts[1], topics, partitions));
        }
        result.put("readers", readers);
        result.put("compression", settings.getProperty("compression.type", "none"));
        result.put("acks", settings.getProperty("acks"));
    }

    /** A Kafka Streams application (group.protocol=streams, KIP-1071), in StreamsApp.java: compiled only with the
     *  kafka-streams jars on the class path, so reached by name. */
    private static void streamsGroup(String bootstrap, Step step, Map<String, Object> result) throws Exception {
        Class<?> app;
        try {
            app = Class.forName("StreamsApp");
        } catch (ClassNotFoundException e) {
            throw new IllegalStateException("streams-group needs SampleClients built with kafka-streams (StreamsApp)");
        }
        app.getMethod("run", String.class, Map.class, Map.class).invoke(null, bootstrap, step.options, result);
    }

    // -- the client's protocol table ----------------------------------------------------------------------
    private static Map<String, Object> protocol() {
        Map<String, Object> apis = new LinkedHashMap<>();
        for (ApiKeys api : ApiKeys.values()) {
            List<Integer> withErrorCode = new ArrayList<>();
            Schema[] schemas = api.messageType.responseSchemas();
            for (int version = 0; version < schemas.length; version++) {
                if (schemas[version] != null && schemas[version].get("error_code") != null) {
                    withErrorCode.add(version);
                }
            }
            Map<String, Object> entry = new LinkedHashMap<>();
            entry.put("api_key", (int) api.id);
            entry.put("api_name", api.name);
            entry.put("error_code_versions", withErrorCode);
            apis.put(api.name(), entry);
        }
        Map<String, Object> errors = new TreeMap<>();
        for (Errors error : Errors.values()) {
            errors.put(Short.toString(error.code()), error.name());
        }
        Map<String, Object> table = new LinkedHashMap<>();
        table.put("client_version", clientVersion());
        table.put("apis", apis);
        table.put("errors", errors);
        return table;
    }

    /** From the properties file AppInfoParser reads (a class that moved between 3.x and 4.x). */
    private static String clientVersion() {
        Properties properties = new Properties();
        try (InputStream in = ApiKeys.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                properties.load(in);
            }
        } catch (IOException e) {
            return "unknown";
        }
        return properties.getProperty("version", "unknown");
    }

    // -- a little JSON ----------------------------------------------------------------------------------
    private static String json(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    private static void write(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                if (!first) {
                    out.append(", ");
                }
                first = false;
                write(out, String.valueOf(entry.getKey()));
                out.append(": ");
                write(out, entry.getValue());
            }
            out.append('}');
        } else if (value instanceof Collection) {
            out.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) value) {
                if (!first) {
                    out.append(", ");
                }
                first = false;
                write(out, item);
            }
            out.append(']');
        } else {
            out.append('"');
            for (char c : value.toString().toCharArray()) {
                if (c == '"' || c == '\\') {
                    out.append('\\').append(c);
                } else if (c < 0x20) {
                    out.append(String.format("\\u%04x", (int) c));
                } else {
                    out.append(c);
                }
            }
            out.append('"');
        }
    }
}
