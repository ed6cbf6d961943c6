import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.PartitionInfo;
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
 * </pre>
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
            Map<String, ? extends Future<Void>> futures = admin.createTopics(wanted).values();
            for (String topic : topics) {
                try {
                    futures.get(topic).get(30, TimeUnit.SECONDS);
                    created.put(topic, partitions);
                } catch (ExecutionException e) {
                    errors.put(topic, e.getCause().getClass().getSimpleName());
                }
            }
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
