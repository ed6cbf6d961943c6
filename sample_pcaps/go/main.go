// Command kafkacap-go-clients runs franz-go or sarama against a broker for sample_pcaps/go_clients.py: it
// creates topics, produces keyed records with one codec per topic, consumes them back in a consumer group,
// commits and leaves, then prints what the client saw as JSON on stdout.
//
//	kafkacap-go-clients franz  -bootstrap 127.0.0.1:9092 -client-id franz -topic go-franz-gzip:3:gzip -records 12 -group franz-group
//	kafkacap-go-clients sarama -bootstrap 127.0.0.1:9092 -client-id sarama -topic go-sarama-lz4:2:lz4 -group sarama-group
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	sessionTimeout    = 6 * time.Second
	heartbeatInterval = time.Second
)

type topicSpec struct {
	Name       string
	Partitions int32
	Codec      string
}

type options struct {
	bootstrap    []string
	clientID     string
	topics       []topicSpec
	records      int
	group        string
	create       bool
	idempotent   bool
	kafkaVersion string
	maxVersions  string
	timeout      time.Duration
	security     securityOptions // TLS and SASL (security.go)
}

// Produced: records the broker acknowledged on one partition.
type Produced struct {
	Topic      string  `json:"topic"`
	Partition  int32   `json:"partition"`
	ClientID   string  `json:"client_id"`
	Codec      string  `json:"codec"`
	Acks       int     `json:"acks"`
	Idempotent bool    `json:"idempotent"`
	Count      int     `json:"count"`
	Offsets    []int64 `json:"offsets"`
}

// Consumed: records handed to the application from one partition.
type Consumed struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	ClientID   string `json:"client_id"`
	Count      int    `json:"count"`
	LastOffset int64  `json:"last_offset"`
}

// Group: one member's view of its consumer group.
type Group struct {
	ID         string                      `json:"id"`
	Member     string                      `json:"member"`
	Protocol   string                      `json:"protocol"`
	Committed  map[string]map[string]int64 `json:"committed"`
	Left       bool                        `json:"left"`
	Assignment map[string][]int32          `json:"assignment,omitempty"`
}

// Output is what the program prints.
type Output struct {
	Client      string         `json:"client"`
	Version     string         `json:"version"`
	TraceMethod string         `json:"trace_method"`
	Produced    []Produced     `json:"produced"`
	Consumed    []Consumed     `json:"consumed"`
	Groups      []Group        `json:"groups"`
	Requests    []*Request     `json:"requests"`
	Checks      map[string]any `json:"checks"`
	Notes       []string       `json:"notes"`
	AuthProbe   *AuthProbe     `json:"auth_probe,omitempty"`
	Error       string         `json:"error,omitempty"`
	Seconds     float64        `json:"seconds"`

	mu sync.Mutex
}

func (o *Output) note(format string, args ...any) {
	o.mu.Lock()
	o.Notes = append(o.Notes, fmt.Sprintf(format, args...))
	o.mu.Unlock()
}

func recordValue(topic string, index int) []byte {
	return fmt.Appendf(nil, `{"topic": "%s", "seq": %d, "note": "%s"}`, topic, index, strings.Repeat("sample ", 5))
}

func recordKey(index int) []byte { return fmt.Appendf(nil, "key-%d", index%5) }

func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == path {
				return dep.Version
			}
		}
	}
	return "unknown"
}

// partitionTally gathers per-partition counts and offset ranges.
type partitionTally struct {
	count   int
	offsets []int64
}

type tally map[string]map[int32]*partitionTally

func (t tally) add(topic string, partition int32, offset int64) {
	byPartition := t[topic]
	if byPartition == nil {
		byPartition = map[int32]*partitionTally{}
		t[topic] = byPartition
	}
	entry := byPartition[partition]
	if entry == nil {
		entry = &partitionTally{}
		byPartition[partition] = entry
	}
	entry.count++
	entry.offsets = append(entry.offsets, offset)
}

func (t tally) total() int {
	n := 0
	for _, byPartition := range t {
		for _, entry := range byPartition {
			n += entry.count
		}
	}
	return n
}

// each walks topics and partitions in order.
func (t tally) each(fn func(topic string, partition int32, entry *partitionTally)) {
	topics := make([]string, 0, len(t))
	for topic := range t {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	for _, topic := range topics {
		partitions := make([]int32, 0, len(t[topic]))
		for partition := range t[topic] {
			partitions = append(partitions, partition)
		}
		sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
		for _, partition := range partitions {
			fn(topic, partition, t[topic][partition])
		}
	}
}

func (o *Output) addProduced(t tally, clientID, codec string, idempotent bool) {
	t.each(func(topic string, partition int32, e *partitionTally) {
		offsets := append([]int64(nil), e.offsets...)
		slices.Sort(offsets)
		o.Produced = append(o.Produced, Produced{topic, partition, clientID, codec, -1, idempotent, e.count, offsets})
	})
}

func (o *Output) addConsumed(t tally, clientID string) {
	t.each(func(topic string, partition int32, e *partitionTally) {
		o.Consumed = append(o.Consumed, Consumed{topic, partition, clientID, e.count, slices.Max(e.offsets)})
	})
}

// leftGroup: the member's LeaveGroup was answered without error, as read from its own socket.
func leftGroup(tap *Tap, clientID string) bool {
	for _, request := range tap.Requests() {
		if request.APIKey == 13 && request.ClientID != nil && *request.ClientID == clientID &&
			request.ResponseReceived && request.ResponseErrorCode != nil && *request.ResponseErrorCode == 0 {
			return true
		}
	}
	return false
}

func parseTopic(text string) (topicSpec, error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return topicSpec{}, fmt.Errorf("topic %q: want name:partitions:codec", text)
	}
	partitions, err := strconv.Atoi(parts[1])
	if err != nil || partitions < 1 {
		return topicSpec{}, fmt.Errorf("topic %q: bad partition count", text)
	}
	switch parts[2] {
	case "none", "gzip", "snappy", "lz4", "zstd":
	default:
		return topicSpec{}, fmt.Errorf("topic %q: unknown codec %q", text, parts[2])
	}
	return topicSpec{parts[0], int32(partitions), parts[2]}, nil
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "franz" && os.Args[1] != "sarama") {
		fmt.Fprintln(os.Stderr, "usage: kafkacap-go-clients franz|sarama -bootstrap HOST:PORT -topic NAME:PARTITIONS:CODEC ... [flags]")
		os.Exit(2)
	}
	library := os.Args[1]
	flags := flag.NewFlagSet(library, flag.ExitOnError)
	var o options
	bootstrap := flags.String("bootstrap", "127.0.0.1:9092", "comma-separated seed brokers")
	flags.StringVar(&o.clientID, "client-id", library, "client id prefix: -producer-CODEC, -consumer are appended")
	flags.Func("topic", "NAME:PARTITIONS:CODEC (repeatable)", func(text string) error {
		spec, err := parseTopic(text)
		o.topics = append(o.topics, spec)
		return err
	})
	flags.IntVar(&o.records, "records", 12, "records produced to each topic")
	flags.StringVar(&o.group, "group", "", "consume everything back in this group (empty: do not consume)")
	flags.BoolVar(&o.create, "create", true, "create the topics first (CreateTopics)")
	flags.BoolVar(&o.idempotent, "idempotent", true, "franz-go: idempotent producer (InitProducerId)")
	flags.StringVar(&o.kafkaVersion, "kafka-version", "", "sarama: the broker version it assumes (default its newest)")
	flags.StringVar(&o.maxVersions, "max-versions", "", "franz-go: cap request versions at this Kafka release (kversion.FromString)")
	flags.DurationVar(&o.timeout, "timeout", 45*time.Second, "give up after this long")
	o.security.register(flags)
	flags.Parse(os.Args[2:])
	o.bootstrap = strings.Split(*bootstrap, ",")
	if len(o.topics) == 0 {
		fmt.Fprintln(os.Stderr, "no -topic given")
		os.Exit(2)
	}
	if err := o.security.load(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer o.security.Close()

	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	out := &Output{Checks: map[string]any{}, Produced: []Produced{}, Consumed: []Consumed{}, Groups: []Group{},
		Notes: []string{}}
	var tap *Tap
	var err error
	if library == "franz" {
		tap = NewTap("franz-go")
		tap.tls = o.security.tls
		out.Client, out.Version = "franz-go", moduleVersion("github.com/twmb/franz-go")
		err = runFranz(ctx, o, tap, out)
	} else {
		tap = NewTap("sarama")
		tap.tls = o.security.tls
		out.Client, out.Version = "sarama", moduleVersion("github.com/IBM/sarama")
		err = runSarama(ctx, o, tap, out)
	}
	if err != nil {
		out.Error = err.Error()
	}
	o.security.describe(out)
	out.Requests = tap.Requests()
	for _, problem := range tap.Problems() {
		out.note("request log: %s", problem)
	}
	out.Seconds = time.Since(started).Seconds()
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", " ")
	if err := encoder.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if out.Error != "" {
		fmt.Fprintln(os.Stderr, "failed:", out.Error)
		os.Exit(1)
	}
}
