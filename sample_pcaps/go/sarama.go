package main

// sarama: an admin client creates the topics (ClusterAdmin), one client per topic produces to it (SyncProducer,
// its compression being a config setting), then one ConsumerGroup member reads every topic, commits
// synchronously and leaves on Close.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/rcrowley/go-metrics"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keptRegistry is a metrics registry whose meters outlive the client: sarama unregisters them all when a
// broker connection or client closes, and the request counts are read after everything is closed.
type keptRegistry struct{ metrics.Registry }

func (keptRegistry) Unregister(string) {}
func (keptRegistry) UnregisterAll()    {}

// meterCount reads a meter's total, zero when sarama never registered it.
func meterCount(registry metrics.Registry, name string) int {
	if meter, ok := registry.Get(name).(metrics.Meter); ok {
		return int(meter.Count())
	}
	return 0
}

type saramaDialer struct{ tap *Tap }

func (d saramaDialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.tap.Dial(ctx, network, address)
}

type saramaRun struct {
	o          options
	tap        *Tap
	out        *Output
	version    sarama.KafkaVersion
	registries []metrics.Registry
}

func (s *saramaRun) config(clientID string) *sarama.Config {
	config := sarama.NewConfig()
	config.ClientID = clientID
	config.Version = s.version
	config.Net.Proxy.Enable = true
	config.Net.Proxy.Dialer = saramaDialer{s.tap}
	registry := keptRegistry{metrics.NewRegistry()}
	config.MetricRegistry = registry
	s.registries = append(s.registries, registry)
	s.o.security.saramaSASL(config)
	return config
}

// compare puts the agreement between sarama's request meters and the socket log into the output's checks:
// "request-rate" counts every request written, "protocol-requests-rate-KEY" those of one API key (sarama
// does not count its ApiVersions requests there).
func (s *saramaRun) compare() {
	written, byKey := 0, map[int16]int{}
	for _, request := range s.tap.Requests() {
		if request.WriteError == "" {
			written++
			byKey[request.APIKey]++
		}
	}
	metered := 0
	meteredByKey := map[int16]int{}
	for _, registry := range s.registries {
		metered += meterCount(registry, "request-rate")
		for key := range byKey {
			meteredByKey[key] += meterCount(registry, "protocol-requests-rate-"+strconv.Itoa(int(key)))
		}
	}
	perKey := true
	for key, count := range byKey {
		if key != 18 && meteredByKey[key] != count {
			perKey = false
			s.out.note("sarama's protocol-requests-rate-%d meter counts %d %s requests, the socket log %d", key,
				meteredByKey[key], kmsg.NameForKey(key), count)
		}
	}
	s.out.Checks["metered_requests"] = metered
	s.out.Checks["request_meter_matches_socket"] = metered == written
	s.out.Checks["per_api_meters_match_socket"] = perKey
	if metered != written {
		s.out.note("sarama's request-rate meter counts %d requests, the socket log %d", metered, written)
	}
}

func saramaCodec(name string) sarama.CompressionCodec {
	switch name {
	case "gzip":
		return sarama.CompressionGZIP
	case "snappy":
		return sarama.CompressionSnappy
	case "lz4":
		return sarama.CompressionLZ4
	case "zstd":
		return sarama.CompressionZSTD
	}
	return sarama.CompressionNone
}

func runSarama(ctx context.Context, o options, tap *Tap, out *Output) error {
	version := sarama.MaxVersion
	if o.kafkaVersion != "" {
		parsed, err := sarama.ParseKafkaVersion(o.kafkaVersion)
		if err != nil {
			return err
		}
		version = parsed
	}
	s := &saramaRun{o: o, tap: tap, out: out, version: version}
	out.TraceMethod = "sarama: request headers (api key, version, correlation id, client id) parsed from the " +
		"bytes sarama writes to its socket (a Config.Net.Proxy.Dialer wrapper), response frames from the bytes it " +
		"reads; cross-checked with sarama's own request meters (request-rate, protocol-requests-rate-KEY); " +
		"sarama configured as Kafka " + version.String()
	defer s.compare()
	if o.create {
		if err := s.create(ctx, o.clientID+"-admin"); err != nil {
			return fmt.Errorf("%s-admin: %w", o.clientID, err)
		}
	}
	expected := 0
	for _, topic := range o.topics {
		clientID := fmt.Sprintf("%s-producer-%s", o.clientID, topic.Codec)
		produced, err := s.produce(topic, clientID)
		if err != nil {
			return fmt.Errorf("%s: %w", clientID, err)
		}
		out.addProduced(produced, clientID, topic.Codec, false)
		expected += produced.total()
	}
	if o.group == "" {
		return nil
	}
	return s.consume(ctx, o.clientID+"-consumer", expected)
}

// create makes the topics with a ClusterAdmin (one CreateTopics request each), then refreshes their metadata
// until every partition has a leader, so no Produce meets NOT_LEADER_OR_FOLLOWER and is retried.
func (s *saramaRun) create(ctx context.Context, clientID string) error {
	client, err := sarama.NewClient(s.o.bootstrap, s.config(clientID))
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return err
	}
	defer admin.Close() // closes the client too
	names := make([]string, len(s.o.topics))
	for i, topic := range s.o.topics {
		names[i] = topic.Name
		err := admin.CreateTopic(topic.Name, &sarama.TopicDetail{NumPartitions: topic.Partitions,
			ReplicationFactor: 1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("CreateTopics %s: %w", topic.Name, err)
		}
	}
	for ctx.Err() == nil {
		if client.RefreshMetadata(names...) == nil && saramaLed(client, s.o.topics) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the topics have no leaders: %w", ctx.Err())
}

func saramaLed(client sarama.Client, topics []topicSpec) bool {
	for _, topic := range topics {
		partitions, err := client.Partitions(topic.Name)
		if err != nil || len(partitions) < int(topic.Partitions) {
			return false
		}
		for _, partition := range partitions {
			if leader, err := client.Leader(topic.Name, partition); err != nil || leader == nil {
				return false
			}
		}
	}
	return true
}

func (s *saramaRun) produce(topic topicSpec, clientID string) (tally, error) {
	config := s.config(clientID)
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Compression = saramaCodec(topic.Codec)
	config.Producer.Flush.Frequency = 5 * time.Millisecond
	producer, err := sarama.NewSyncProducer(s.o.bootstrap, config) // its own client, closed with it
	if err != nil {
		return nil, err
	}
	messages := make([]*sarama.ProducerMessage, s.o.records)
	for i := range messages {
		messages[i] = &sarama.ProducerMessage{Topic: topic.Name, Key: sarama.ByteEncoder(recordKey(i)),
			Value:   sarama.ByteEncoder(recordValue(topic.Name, i)),
			Headers: []sarama.RecordHeader{{Key: []byte("origin"), Value: []byte("sample_pcaps")}}}
	}
	sendErr := producer.SendMessages(messages)
	produced := tally{}
	var failed sarama.ProducerErrors
	errors.As(sendErr, &failed)
	failedSet := map[*sarama.ProducerMessage]bool{}
	for _, failure := range failed {
		failedSet[failure.Msg] = true
	}
	if sendErr == nil || failed != nil { // otherwise nothing was sent
		for _, message := range messages {
			if !failedSet[message] {
				produced.add(message.Topic, message.Partition, message.Offset)
			}
		}
	}
	if err := producer.Close(); err != nil {
		s.out.note("sarama producer close: %v", err)
	}
	if sendErr != nil {
		return produced, fmt.Errorf("produce: %w", sendErr)
	}
	return produced, nil
}

// groupHandler counts what the group hands over, marks it, and commits once everything has arrived.
type groupHandler struct {
	expected int
	mu       sync.Mutex
	consumed tally
	marked   map[string]map[string]int64
	done     chan struct{}
	once     sync.Once
	assigned map[string][]int32
}

func (h *groupHandler) Setup(session sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for topic, partitions := range session.Claims() {
		h.assigned[topic] = append(h.assigned[topic], partitions...)
	}
	return nil
}

func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *groupHandler) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-session.Context().Done():
			return nil
		case message, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			session.MarkMessage(message, "")
			h.mu.Lock()
			h.consumed.add(message.Topic, message.Partition, message.Offset)
			if h.marked[message.Topic] == nil {
				h.marked[message.Topic] = map[string]int64{}
			}
			h.marked[message.Topic][strconv.Itoa(int(message.Partition))] = message.Offset + 1
			complete := h.consumed.total() >= h.expected
			h.mu.Unlock()
			if complete {
				h.once.Do(func() {
					session.Commit() // synchronous: every marked offset, in one OffsetCommit
					close(h.done)
				})
			}
		}
	}
}

func (s *saramaRun) consume(ctx context.Context, clientID string, expected int) error {
	config := s.config(clientID)
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.AutoCommit.Enable = false
	config.Consumer.Return.Errors = true
	config.Consumer.Group.Session.Timeout = sessionTimeout
	config.Consumer.Group.Heartbeat.Interval = heartbeatInterval
	config.Consumer.MaxWaitTime = 500 * time.Millisecond
	group, err := sarama.NewConsumerGroup(s.o.bootstrap, s.o.group, config)
	if err != nil {
		return err
	}
	var commitErrors []error
	var errorsDone sync.WaitGroup
	errorsDone.Go(func() {
		for err := range group.Errors() {
			commitErrors = append(commitErrors, err)
			s.out.note("sarama consumer group: %v", err)
		}
	})
	names := make([]string, len(s.o.topics))
	for i, topic := range s.o.topics {
		names[i] = topic.Name
	}
	handler := &groupHandler{expected: expected, consumed: tally{}, marked: map[string]map[string]int64{},
		done: make(chan struct{}), assigned: map[string][]int32{}}
	consumeCtx, stop := context.WithCancel(ctx)
	var consuming sync.WaitGroup
	consuming.Go(func() {
		for consumeCtx.Err() == nil {
			if err := group.Consume(consumeCtx, names, handler); err != nil && consumeCtx.Err() == nil {
				s.out.note("sarama Consume: %v", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
	})
	select {
	case <-handler.done:
	case <-ctx.Done():
	}
	stop()
	consuming.Wait()
	closeErr := group.Close() // leaves the group (LeaveGroup)
	errorsDone.Wait()
	handler.mu.Lock()
	defer handler.mu.Unlock()
	s.out.addConsumed(handler.consumed, clientID)
	committed := handler.marked
	if len(commitErrors) > 0 {
		committed = map[string]map[string]int64{}
	}
	s.out.Groups = append(s.out.Groups, Group{ID: s.o.group, Member: clientID, Protocol: "classic",
		Committed: committed, Left: leftGroup(s.tap, clientID), Assignment: handler.assigned})
	if handler.consumed.total() < expected {
		return fmt.Errorf("consumed %d of %d records", handler.consumed.total(), expected)
	}
	return closeErr
}
