package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// encodeHeader writes a request header by hand: v0 when noClientID, else
// v1, plus the tag section tags (already encoded) when flexible.
func encodeHeader(key, version int16, corr int32, clientID *string, flexible bool, tags []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	if clientID == nil {
		b = binary.BigEndian.AppendUint16(b, 0xffff)
	} else {
		b = binary.BigEndian.AppendUint16(b, uint16(len(*clientID)))
		b = append(b, *clientID...)
	}
	if flexible {
		if tags == nil {
			tags = []byte{0}
		}
		b = append(b, tags...)
	}
	return b
}

func strp(s string) *string { return &s }

func TestParseRequestHeader(t *testing.T) {
	produce := kmsg.NewPtrProduceRequest()
	produce.Acks = -1
	produce.TimeoutMillis = 1500
	produce.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 3, Records: []byte{1, 2, 3}}}}}
	metadata := kmsg.NewPtrMetadataRequest()
	metadata.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("orders")}}
	apiVersions := kmsg.NewPtrApiVersionsRequest()
	apiVersions.ClientSoftwareName = "kgate-test"
	apiVersions.ClientSoftwareVersion = "1.0"

	// Two tags in the header, which a broker must skip: tag 0 with 3 bytes,
	// tag 5 with 0 bytes.
	twoTags := []byte{2, 0, 3, 'a', 'b', 'c', 5, 0}

	tests := []struct {
		name     string
		req      kmsg.Request
		version  int16
		clientID *string
		tags     []byte
		flexible bool
	}{
		{"produce v3", produce, 3, strp("producer-1"), nil, false},
		{"produce v8", produce, 8, strp("producer-1"), nil, false},
		{"produce v9 flexible", produce, 9, strp("producer-1"), nil, true},
		{"metadata v1 null client id", metadata, 1, nil, nil, false},
		{"metadata v8", metadata, 8, strp(""), nil, false},
		{"metadata v9 flexible", metadata, 9, strp("rdkafka"), nil, true},
		{"metadata v12 header tags", metadata, 12, strp("c"), twoTags, true},
		{"api versions v0", apiVersions, 0, strp("sarama"), nil, false},
		{"api versions v2", apiVersions, 2, strp("sarama"), nil, false},
		{"api versions v3 flexible", apiVersions, 3, strp("kgo"), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.SetVersion(tt.version)
			body := tt.req.AppendTo(nil)
			frame := append(encodeHeader(tt.req.Key(), tt.version, 77, tt.clientID, tt.flexible, tt.tags), body...)

			h, rest, err := ParseRequestHeader(frame)
			if err != nil {
				t.Fatal(err)
			}
			want := RequestHeader{APIKey: tt.req.Key(), APIVersion: tt.version, CorrelationID: 77, Flexible: tt.flexible}
			if tt.clientID != nil {
				want.ClientID = *tt.clientID
			}
			if h != want {
				t.Fatalf("header = %+v, want %+v", h, want)
			}
			if !bytes.Equal(rest, body) {
				t.Fatalf("body = %x, want %x", rest, body)
			}
			got, err := DecodeRequest(h, rest)
			if err != nil {
				t.Fatal(err)
			}
			if got.Key() != tt.req.Key() || got.GetVersion() != tt.version {
				t.Fatalf("decoded key %d v%d", got.Key(), got.GetVersion())
			}
			if again := got.AppendTo(nil); !bytes.Equal(again, body) {
				t.Fatalf("re-encoded body differs:\n got %x\nwant %x", again, body)
			}

			// Every strict prefix of the header is an error.
			hdrLen := len(frame) - len(body)
			for n := range hdrLen {
				if _, _, err := ParseRequestHeader(frame[:n]); !errors.Is(err, ErrMalformedRequest) {
					t.Fatalf("prefix %d of %d: err = %v", n, hdrLen, err)
				}
			}
		})
	}
}

// kmsg's own request writer (which franz-go clients use) must agree with us.
func TestParseRequestHeaderFromFormatter(t *testing.T) {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("kgo-client"))
	for _, v := range []int16{0, 8, 9, 12} {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		frame := f.AppendRequest(nil, req, 42)
		h, body, err := ParseRequestHeader(frame[4:])
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if h.ClientID != "kgo-client" || h.CorrelationID != 42 || h.Flexible != (v >= 9) {
			t.Fatalf("v%d: header %+v", v, h)
		}
		if _, err := DecodeRequest(h, body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
	}
}

func TestParseRequestHeaderErrors(t *testing.T) {
	maxAV := kmsg.NewPtrApiVersionsRequest().MaxVersion()
	tests := []struct {
		name    string
		frame   []byte
		want    RequestHeader
		wantErr error
		rest    []byte
	}{
		{
			name:    "unknown api key",
			frame:   encodeHeader(9999, 0, 5, strp("x"), false, nil),
			want:    RequestHeader{APIKey: 9999, CorrelationID: 5},
			wantErr: ErrUnknownAPIKey,
		},
		{
			// A client newer than kmsg sends ApiVersions at its own
			// highest version, flexible; we read it as v1 to answer.
			name:    "api versions above max",
			frame:   append(encodeHeader(18, maxAV+1, 6, strp("future"), true, nil), 0xde, 0xad),
			want:    RequestHeader{APIKey: 18, APIVersion: maxAV + 1, CorrelationID: 6, ClientID: "future"},
			wantErr: ErrUnsupportedVersion,
			rest:    []byte{0, 0xde, 0xad},
		},
		{
			name:    "negative version",
			frame:   encodeHeader(3, -1, 7, strp("c"), false, nil),
			want:    RequestHeader{APIKey: 3, APIVersion: -1, CorrelationID: 7, ClientID: "c"},
			wantErr: ErrUnsupportedVersion,
			rest:    []byte{},
		},
		{
			name:    "client id length below -1",
			frame:   []byte{0, 3, 0, 1, 0, 0, 0, 8, 0xff, 0xfe},
			want:    RequestHeader{APIKey: 3, APIVersion: 1, CorrelationID: 8},
			wantErr: ErrMalformedRequest,
		},
		{
			name:    "client id past the end",
			frame:   []byte{0, 3, 0, 1, 0, 0, 0, 8, 0, 5, 'a'},
			want:    RequestHeader{APIKey: 3, APIVersion: 1, CorrelationID: 8},
			wantErr: ErrMalformedRequest,
		},
		{
			name:    "tag size past the end",
			frame:   encodeHeader(3, 9, 9, strp("c"), true, []byte{1, 0, 9, 'a'}),
			want:    RequestHeader{APIKey: 3, APIVersion: 9, CorrelationID: 9, ClientID: "c", Flexible: true},
			wantErr: ErrMalformedRequest,
		},
		{
			name:  "controlled shutdown v0 has no client id",
			frame: []byte{0, 7, 0, 0, 0, 0, 0, 10, 0, 0, 0, 1},
			want:  RequestHeader{APIKey: 7, CorrelationID: 10},
			rest:  []byte{0, 0, 0, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, rest, err := ParseRequestHeader(tt.frame)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if h != tt.want {
				t.Fatalf("header = %+v, want %+v", h, tt.want)
			}
			if tt.rest != nil && !bytes.Equal(rest, tt.rest) {
				t.Fatalf("rest = %x, want %x", rest, tt.rest)
			}
		})
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	produce := kmsg.NewPtrProduceRequest()
	produce.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Records: []byte{1}}}}}
	for _, v := range []int16{3, 9} {
		produce.SetVersion(v)
		body := produce.AppendTo(nil)
		h := RequestHeader{APIKey: 0, APIVersion: v}
		for n := range len(body) {
			if _, err := DecodeRequest(h, body[:n]); !errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("produce v%d, %d of %d bytes: err = %v", v, n, len(body), err)
			}
		}
	}
	if _, err := DecodeRequest(RequestHeader{APIKey: 9999}, nil); !errors.Is(err, ErrUnknownAPIKey) {
		t.Fatalf("unknown key: err = %v", err)
	}
	if _, err := DecodeRequest(RequestHeader{APIKey: 18, APIVersion: 999}, nil); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("unsupported version: err = %v", err)
	}
}

func TestAppendResponse(t *testing.T) {
	apiVersions := func(v int16) kmsg.Response {
		r := kmsg.NewPtrApiVersionsResponse()
		r.SetVersion(v)
		r.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: 0, MaxVersion: 4}}
		return r
	}
	metadata := func(v int16) kmsg.Response {
		r := kmsg.NewPtrMetadataResponse()
		r.SetVersion(v)
		r.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 0, Host: "127.0.0.1", Port: 9092}}
		return r
	}
	tests := []struct {
		name    string
		resp    kmsg.Response
		wantTag bool
	}{
		{"api versions v0", apiVersions(0), false},
		{"api versions v3 is never flexible", apiVersions(3), false},
		{"api versions v4 is never flexible", apiVersions(4), false},
		{"metadata v8", metadata(8), false},
		{"metadata v9 flexible", metadata(9), true},
		{"metadata v12 flexible", metadata(12), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("previous response")
			out := AppendResponse(bytes.Clone(prefix), 1234, tt.resp)
			if !bytes.HasPrefix(out, prefix) {
				t.Fatal("dst prefix overwritten")
			}
			frame := out[len(prefix):]
			if size := binary.BigEndian.Uint32(frame); int(size) != len(frame)-4 {
				t.Fatalf("size %d, frame has %d bytes after it", size, len(frame)-4)
			}
			if corr := int32(binary.BigEndian.Uint32(frame[4:])); corr != 1234 {
				t.Fatalf("correlation id %d", corr)
			}
			rest := frame[8:]
			if tt.wantTag {
				if rest[0] != 0 {
					t.Fatalf("tag section %x, want 00", rest[0])
				}
				rest = rest[1:]
			}
			if body := tt.resp.AppendTo(nil); !bytes.Equal(rest, body) {
				t.Fatalf("body = %x, want %x", rest, body)
			}
			back := kmsg.ResponseForKey(tt.resp.Key())
			back.SetVersion(tt.resp.GetVersion())
			if err := back.ReadFrom(rest); err != nil {
				t.Fatalf("kmsg cannot read the body back: %v", err)
			}
		})
	}
}

// The cached version table must agree with kmsg for every key and version.
func TestFlexibilityMatchesKmsg(t *testing.T) {
	for key := int16(-1); key < 1024; key++ {
		req := kmsg.RequestForKey(key)
		frame := encodeHeader(key, 0, 1, strp("c"), false, nil)
		if req == nil {
			if _, _, err := ParseRequestHeader(frame); !errors.Is(err, ErrUnknownAPIKey) {
				t.Fatalf("key %d: err = %v, want ErrUnknownAPIKey", key, err)
			}
			continue
		}
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req.SetVersion(v)
			binary.BigEndian.PutUint16(frame[2:], uint16(v))
			h, _, err := ParseRequestHeader(append(frame, 0))
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			if h.Flexible != req.IsFlexible() {
				t.Fatalf("%s v%d: flexible %v, kmsg says %v", kmsg.NameForKey(key), v, h.Flexible, req.IsFlexible())
			}
		}
	}
}
