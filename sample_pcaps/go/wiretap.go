package main

// The request log of a Go client: every request frame it hands to its socket and every response frame it
// reads back, parsed from those bytes by a net.Conn wrapper installed through the client's own dialer hook.
// Neither franz-go nor sarama logs correlation ids, so the bytes the client writes are the closest view of
// what it sent; franz-go's hooks and sarama's metrics are compared with this log (see checks in main.go).

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request is one request frame as the client wrote it, with what became of it.
type Request struct {
	Client            string  `json:"client"`
	ClientID          *string `json:"client_id"`
	ClientPort        int     `json:"client_port"`
	Broker            string  `json:"broker"`
	APIKey            int16   `json:"api_key"`
	APIVersion        int16   `json:"api_version"`
	CorrelationID     int32   `json:"correlation_id"`
	ExpectsResponse   bool    `json:"expects_response"`
	ResponseReceived  bool    `json:"response_received"`
	ResponseErrorCode *int16  `json:"response_error_code"`
	Size              int     `json:"size"`
	ResponseSize      int     `json:"response_size,omitempty"`
	SentAt            int64   `json:"sent_at"`
	ReceivedAt        *int64  `json:"received_at"`
	WriteError        string  `json:"write_error,omitempty"`
}

// Tap collects the requests of every connection one client library opens.
type Tap struct {
	client   string
	tls      *tls.Config // connect with TLS: the log reads the bytes before encryption (security.go)
	mu       sync.Mutex
	requests []*Request
	order    atomic.Int64
	problems []string
}

func NewTap(client string) *Tap { return &Tap{client: client} }

// Dial opens a TCP connection whose traffic is logged.
func (t *Tap) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	local := 0
	if addr, ok := conn.LocalAddr().(*net.TCPAddr); ok {
		local = addr.Port
	}
	if t.tls != nil {
		secured, err := tlsClient(ctx, conn, t.tls, address)
		if err != nil {
			return nil, err
		}
		conn = secured
	}
	return &tappedConn{Conn: conn, tap: t, local: local, broker: address, pending: map[int32]*Request{}}, nil
}

// Requests returns the log in the order the requests were written.
func (t *Tap) Requests() []*Request {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Request(nil), t.requests...)
}

func (t *Tap) Problems() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.problems...)
}

func (t *Tap) problem(text string) {
	t.mu.Lock()
	t.problems = append(t.problems, text)
	t.mu.Unlock()
}

type tappedConn struct {
	net.Conn
	tap    *Tap
	local  int
	broker string

	mu      sync.Mutex
	written []byte // bytes of a request frame not yet complete
	read    []byte // bytes of a response frame not yet complete
	pending map[int32]*Request
}

// Write logs the frames completed by p before handing p to the socket, so a response read on another
// goroutine always finds its request.
func (c *tappedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.written = append(c.written, p...)
	var frames []*Request
	for len(c.written) >= 4 {
		size := int(binary.BigEndian.Uint32(c.written))
		if len(c.written) < 4+size {
			break
		}
		if request := c.parseRequest(c.written[4 : 4+size]); request != nil {
			request.Size = 4 + size
			frames = append(frames, request)
		}
		c.written = c.written[4+size:]
	}
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	if err != nil && n < len(p) {
		c.mu.Lock()
		for _, request := range frames {
			request.WriteError = err.Error()
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *tappedConn) parseRequest(frame []byte) *Request {
	if len(frame) < 10 {
		c.tap.problem("a request frame shorter than its header")
		return nil
	}
	request := &Request{
		Client:          c.tap.client,
		ClientPort:      c.local,
		Broker:          c.broker,
		APIKey:          int16(binary.BigEndian.Uint16(frame[0:])),
		APIVersion:      int16(binary.BigEndian.Uint16(frame[2:])),
		CorrelationID:   int32(binary.BigEndian.Uint32(frame[4:])),
		ExpectsResponse: true,
	}
	rest := frame[10:]
	if length := int16(binary.BigEndian.Uint16(frame[8:])); length >= 0 && int(length) <= len(rest) {
		id := string(rest[:length])
		request.ClientID = &id
		rest = rest[length:]
	}
	if request.APIKey == 0 { // Produce with acks=0 is never answered
		body := kmsg.NewPtrProduceRequest()
		body.SetVersion(request.APIVersion)
		if body.IsFlexible() {
			rest = skipTags(rest)
		}
		if rest != nil && body.ReadFrom(rest) == nil && body.Acks == 0 {
			request.ExpectsResponse = false
		}
	}
	request.SentAt = c.tap.order.Add(1)
	c.tap.mu.Lock()
	c.tap.requests = append(c.tap.requests, request)
	c.tap.mu.Unlock()
	if request.ExpectsResponse {
		c.pending[request.CorrelationID] = request
	}
	return request
}

// Read hands the client its bytes and logs the response frames they complete.
func (c *tappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.read = append(c.read, p[:n]...)
		for len(c.read) >= 4 {
			size := int(binary.BigEndian.Uint32(c.read))
			if len(c.read) < 4+size {
				break
			}
			c.parseResponse(c.read[4 : 4+size])
			c.read = c.read[4+size:]
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *tappedConn) parseResponse(frame []byte) {
	if len(frame) < 4 {
		c.tap.problem("a response frame shorter than a correlation id")
		return
	}
	correlationID := int32(binary.BigEndian.Uint32(frame))
	request := c.pending[correlationID]
	if request == nil {
		c.tap.problem("a response to a correlation id this connection has no request for")
		return
	}
	delete(c.pending, correlationID)
	received := c.tap.order.Add(1)
	request.ReceivedAt = &received
	request.ResponseReceived = true
	request.ResponseSize = 4 + len(frame)
	request.ResponseErrorCode = topLevelError(request.APIKey, request.APIVersion, frame[4:])
}

// skipTags steps over the tagged fields of a flexible header; nil when they run past the end.
func skipTags(b []byte) []byte {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil
	}
	b = b[n:]
	for ; count > 0; count-- {
		_, n = binary.Uvarint(b)
		if n <= 0 {
			return nil
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil
		}
		b = b[n+int(size):]
	}
	return b
}

// alwaysTopLevelError: the APIs whose responses start with (or, after throttle_time_ms, carry) a top-level
// error_code in every version: groups, ListGroups, SASL, InitProducerId, transactions, DescribeCluster,
// ConsumerGroupHeartbeat, GetTelemetrySubscriptions. Fetch (v7+), Metadata (v13+), OffsetFetch (v2-v7) and
// FindCoordinator (v0-v3) have one in some versions only.
var alwaysTopLevelError = map[int16]bool{11: true, 12: true, 13: true, 14: true, 16: true, 17: true, 22: true,
	25: true, 26: true, 36: true, 60: true, 68: true, 71: true}

// topLevelError decodes the response's top-level error code, for the APIs and versions that have one.
func topLevelError(key, version int16, body []byte) *int16 {
	if key == 18 { // ApiVersions: error_code first in every version, header never flexible
		if len(body) < 2 {
			return nil
		}
		code := int16(binary.BigEndian.Uint16(body))
		return &code
	}
	has := alwaysTopLevelError[key] || (key == 1 && version >= 7) || (key == 3 && version >= 13) ||
		(key == 9 && version >= 2 && version <= 7) || (key == 10 && version <= 3)
	if !has {
		return nil
	}
	response := kmsg.ResponseForKey(key)
	if response == nil {
		return nil
	}
	response.SetVersion(version)
	if response.IsFlexible() {
		body = skipTags(body)
	}
	if body == nil || response.ReadFrom(body) != nil {
		return nil
	}
	var code int16
	switch r := response.(type) {
	case *kmsg.FetchResponse:
		code = r.ErrorCode
	case *kmsg.MetadataResponse:
		code = r.ErrorCode
	case *kmsg.OffsetFetchResponse:
		code = r.ErrorCode
	case *kmsg.FindCoordinatorResponse:
		code = r.ErrorCode
	case *kmsg.JoinGroupResponse:
		code = r.ErrorCode
	case *kmsg.HeartbeatResponse:
		code = r.ErrorCode
	case *kmsg.LeaveGroupResponse:
		code = r.ErrorCode
	case *kmsg.SyncGroupResponse:
		code = r.ErrorCode
	case *kmsg.ListGroupsResponse:
		code = r.ErrorCode
	case *kmsg.SASLHandshakeResponse:
		code = r.ErrorCode
	case *kmsg.InitProducerIDResponse:
		code = r.ErrorCode
	case *kmsg.AddOffsetsToTxnResponse:
		code = r.ErrorCode
	case *kmsg.EndTxnResponse:
		code = r.ErrorCode
	case *kmsg.SASLAuthenticateResponse:
		code = r.ErrorCode
	case *kmsg.DescribeClusterResponse:
		code = r.ErrorCode
	case *kmsg.ConsumerGroupHeartbeatResponse:
		code = r.ErrorCode
	case *kmsg.GetTelemetrySubscriptionsResponse:
		code = r.ErrorCode
	default:
		return nil
	}
	return &code
}

func localPort(conn net.Conn) (int, bool) {
	if addr, ok := conn.LocalAddr().(*net.TCPAddr); ok {
		return addr.Port, true
	}
	return 0, false
}
