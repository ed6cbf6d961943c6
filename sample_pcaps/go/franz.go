package main

// franz-go: an admin client creates the topics, one producer client per topic (its compression is a client
// setting) writes to it, then one classic group consumer (kgo.ConsumerGroup) reads every topic, commits
// synchronously and leaves on Close.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// franzWitness is franz-go's own account of its requests: its broker hooks and its debug log lines
// ("wrote Produce v13"), compared with the request log parsed from the socket.
type franzWitness struct {
	mu       sync.Mutex
	ports    map[int]bool
	writes   map[string]int // "key/bytes" -> count, from OnBrokerWrite
	versions map[string]int // "key/version" -> count, from the debug log
	failures []string
}

func newFranzWitness() *franzWitness {
	return &franzWitness{ports: map[int]bool{}, writes: map[string]int{}, versions: map[string]int{}}
}

// OnBrokerConnect: a connection whose initialization then failed (a refused SASL exchange) was still opened and
// carried requests, so its port counts too.
func (w *franzWitness) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, conn net.Conn, _ error) {
	if conn == nil {
		return
	}
	if port, ok := localPort(conn); ok {
		w.mu.Lock()
		w.ports[port] = true
		w.mu.Unlock()
	}
}

func (w *franzWitness) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, bytesWritten int, _, _ time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failures = append(w.failures, fmt.Sprintf("write of %s failed: %v", kmsg.NameForKey(key), err))
		return
	}
	w.writes[fmt.Sprintf("%d/%d", key, bytesWritten)]++
}

func (w *franzWitness) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (w *franzWitness) Log(level kgo.LogLevel, msg string, _ ...any) {
	if level != kgo.LogLevelDebug || !strings.HasPrefix(msg, "wrote ") {
		return
	}
	fields := strings.Fields(msg) // wrote NAME vN
	if len(fields) != 3 || !strings.HasPrefix(fields[2], "v") {
		return
	}
	version, err := strconv.Atoi(fields[2][1:])
	if err != nil {
		return
	}
	w.mu.Lock()
	w.versions[fields[1]+"/"+strconv.Itoa(version)]++
	w.mu.Unlock()
}

// compare puts the agreement between franz-go's account and the socket log into the output's checks.
func (w *franzWitness) compare(tap *Tap, out *Output) {
	w.mu.Lock()
	defer w.mu.Unlock()
	writes, versions, ports := map[string]int{}, map[string]int{}, map[int]bool{}
	for _, request := range tap.Requests() {
		if request.WriteError != "" {
			continue
		}
		writes[fmt.Sprintf("%d/%d", request.APIKey, request.Size)]++
		versions[kmsg.NameForKey(request.APIKey)+"/"+strconv.Itoa(int(request.APIVersion))]++
		ports[request.ClientPort] = true
	}
	out.Checks["hook_writes_match_socket"] = sameCounts(w.writes, writes)
	out.Checks["debug_log_versions_match_socket"] = sameCounts(w.versions, versions)
	connected := true
	for port := range ports {
		connected = connected && w.ports[port]
	}
	out.Checks["hook_connections_cover_socket_ports"] = connected
	out.Checks["hook_writes"] = sum(w.writes)
	for _, failure := range w.failures {
		out.note("franz-go: %s", failure)
	}
	if !sameCounts(w.writes, writes) {
		out.note("franz-go's OnBrokerWrite hook (api key, bytes) disagrees with the socket log: %v vs %v", w.writes, writes)
	}
	if !sameCounts(w.versions, versions) {
		out.note("franz-go's debug log (api, version) disagrees with the socket log: %v vs %v", w.versions, versions)
	}
}

func sameCounts[K comparable](a, b map[K]int) bool {
	if len(a) != len(b) {
		return false
	}
	for key, count := range a {
		if b[key] != count {
			return false
		}
	}
	return true
}

func sum[K comparable](counts map[K]int) int {
	n := 0
	for _, count := range counts {
		n += count
	}
	return n
}

func franzCodec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

func runFranz(ctx context.Context, o options, tap *Tap, out *Output) error {
	witness := newFranzWitness()
	out.TraceMethod = "franz-go: request headers (api key, version, correlation id, client id) parsed from the " +
		"bytes franz-go writes to its socket (a kgo.Dialer wrapper), response frames from the bytes it reads; " +
		"cross-checked with franz-go's OnBrokerWrite hook (api key and size of every write), its debug log " +
		"('wrote NAME vN') and OnBrokerConnect (local ports)"
	defer witness.compare(tap, out)
	var capped []kgo.Opt
	if o.maxVersions != "" {
		versions := kversion.FromString(o.maxVersions)
		if versions == nil {
			return fmt.Errorf("unknown Kafka release %q for -max-versions", o.maxVersions)
		}
		capped = append(capped, kgo.MaxVersions(versions))
	}
	base := func(clientID string) []kgo.Opt {
		return append([]kgo.Opt{kgo.SeedBrokers(o.bootstrap...), kgo.ClientID(clientID), kgo.Dialer(tap.Dial),
			kgo.WithHooks(witness), kgo.WithLogger(witness)}, capped...)
	}
	common := func(clientID string) []kgo.Opt { return append(base(clientID), o.security.franzSASL()...) }
	if o.security.authProbe {
		probe := o.clientID + "-badauth"
		if err := franzAuthProbe(ctx, base(probe), probe, &o.security, out); err != nil {
			return err
		}
	}
	if o.create {
		if err := franzCreate(ctx, common(o.clientID+"-admin"), o.topics); err != nil {
			return fmt.Errorf("%s-admin: %w", o.clientID, err)
		}
	}
	expected := 0
	for _, topic := range o.topics {
		clientID := fmt.Sprintf("%s-producer-%s", o.clientID, topic.Codec)
		opts := append(common(clientID), kgo.ProducerBatchCompression(franzCodec(topic.Codec)),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond))
		if !o.idempotent {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		client, err := kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		produced, err := franzProduce(ctx, client, o, topic)
		client.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", clientID, err)
		}
		out.addProduced(produced, clientID, topic.Codec, o.idempotent)
		expected += produced.total()
	}
	if o.group == "" {
		return nil
	}
	return franzConsume(ctx, o, common(o.clientID+"-consumer"), o.clientID+"-consumer", expected, tap, out)
}

// franzCreate creates the topics in one CreateTopics request, then asks for their metadata until every
// partition has a leader: a Produce right after creation can meet NOT_LEADER_OR_FOLLOWER and be retried,
// which would make the records on the wire more than the records acknowledged.
func franzCreate(ctx context.Context, opts []kgo.Opt, topics []topicSpec) error {
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	request := kmsg.NewPtrCreateTopicsRequest()
	request.TimeoutMillis = 10000
	metadata := kmsg.NewPtrMetadataRequest()
	for _, topic := range topics {
		entry := kmsg.NewCreateTopicsRequestTopic()
		entry.Topic, entry.NumPartitions, entry.ReplicationFactor = topic.Name, topic.Partitions, 1
		request.Topics = append(request.Topics, entry)
		wanted := kmsg.NewMetadataRequestTopic()
		wanted.Topic = kmsg.StringPtr(topic.Name)
		metadata.Topics = append(metadata.Topics, wanted)
	}
	response, err := request.RequestWith(ctx, client)
	if err != nil {
		return fmt.Errorf("CreateTopics: %w", err)
	}
	for _, created := range response.Topics {
		if created.ErrorCode != 0 && created.ErrorCode != 36 { // 36: TOPIC_ALREADY_EXISTS
			return fmt.Errorf("CreateTopics %s: error code %d", created.Topic, created.ErrorCode)
		}
	}
	for ctx.Err() == nil {
		described, err := metadata.RequestWith(ctx, client)
		if err == nil && franzLed(described, topics) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the topics have no leaders: %w", ctx.Err())
}

func franzLed(described *kmsg.MetadataResponse, topics []topicSpec) bool {
	led := map[string]int32{}
	for _, topic := range described.Topics {
		for _, partition := range topic.Partitions {
			if topic.ErrorCode == 0 && partition.ErrorCode == 0 && partition.Leader >= 0 && topic.Topic != nil {
				led[*topic.Topic]++
			}
		}
	}
	for _, topic := range topics {
		if led[topic.Name] < topic.Partitions {
			return false
		}
	}
	return true
}

func franzProduce(ctx context.Context, client *kgo.Client, o options, topic topicSpec) (tally, error) {
	records := make([]*kgo.Record, o.records)
	for i := range records {
		records[i] = &kgo.Record{Topic: topic.Name, Key: recordKey(i), Value: recordValue(topic.Name, i),
			Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("sample_pcaps")}}}
	}
	produced := tally{}
	var failure error
	for _, result := range client.ProduceSync(ctx, records...) {
		if result.Err != nil {
			failure = result.Err
			continue
		}
		produced.add(result.Record.Topic, result.Record.Partition, result.Record.Offset)
	}
	if failure != nil {
		return produced, fmt.Errorf("produce: %w", failure)
	}
	return produced, nil
}

func franzConsume(ctx context.Context, o options, opts []kgo.Opt, clientID string, expected int, tap *Tap,
	out *Output) error {
	names := make([]string, len(o.topics))
	for i, topic := range o.topics {
		names[i] = topic.Name
	}
	assignment := map[string][]int32{}
	opts = append(opts, kgo.ConsumerGroup(o.group), kgo.ConsumeTopics(names...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(sessionTimeout), kgo.HeartbeatInterval(heartbeatInterval),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			for topic, partitions := range assigned {
				assignment[topic] = append(assignment[topic], partitions...)
			}
		}))
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	consumed := tally{}
	for consumed.total() < expected && ctx.Err() == nil {
		fetches := client.PollFetches(ctx)
		fetches.EachError(func(topic string, partition int32, err error) {
			if ctx.Err() == nil {
				out.note("franz-go fetch %s/%d: %v", topic, partition, err)
			}
		})
		fetches.EachRecord(func(record *kgo.Record) {
			consumed.add(record.Topic, record.Partition, record.Offset)
		})
	}
	committed := map[string]map[string]int64{}
	var commitErr error
	client.CommitOffsetsSync(ctx, client.UncommittedOffsets(),
		func(_ *kgo.Client, request *kmsg.OffsetCommitRequest, response *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				commitErr = err
				return
			}
			for i, topic := range response.Topics {
				for j, partition := range topic.Partitions {
					if partition.ErrorCode != 0 {
						commitErr = fmt.Errorf("commit %s/%d: error code %d", topic.Topic, partition.Partition,
							partition.ErrorCode)
						continue
					}
					offset := request.Topics[i].Partitions[j].Offset
					if committed[topic.Topic] == nil {
						committed[topic.Topic] = map[string]int64{}
					}
					committed[topic.Topic][strconv.Itoa(int(partition.Partition))] = offset
				}
			}
		})
	client.Close() // leaves the group (LeaveGroup) and closes every connection
	out.addConsumed(consumed, clientID)
	out.Groups = append(out.Groups, Group{ID: o.group, Member: clientID, Protocol: "classic",
		Committed: committed, Left: leftGroup(tap, clientID), Assignment: assignment})
	if consumed.total() < expected {
		return fmt.Errorf("consumed %d of %d records", consumed.total(), expected)
	}
	return commitErr
}
