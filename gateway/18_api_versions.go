package gateway

// ApiVersions v0-v3.
//
// Advertises supportedAPIs. A request at a version kgate does not know is answered, as Apache Kafka
// does, with UNSUPPORTED_VERSION in a v0-shaped response listing the supported ranges, so the client
// can retry at a version both sides speak. The response header is never the flexible one (KIP-511).
// v3's client software name and version must be what Apache accepts (validSoftwareName), else the
// answer is INVALID_REQUEST; they are recorded for the connection log only.

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) apiVersions(_ context.Context, req *kmsg.ApiVersionsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrApiVersionsResponse()
	if req.Version >= 3 {
		if !validSoftwareName(req.ClientSoftwareName) || !validSoftwareName(req.ClientSoftwareVersion) {
			resp.ErrorCode = kerr.InvalidRequest.Code
			return resp, nil
		}
		c.software = req.ClientSoftwareName + "/" + req.ClientSoftwareVersion
		if len(c.software) > maxLoggedSoftware {
			c.software = c.software[:maxLoggedSoftware]
		}
	}
	resp.ApiKeys = advertisedAPIs()
	return resp, nil
}

// maxLoggedSoftware bounds the client software name/version a connection keeps for its log.
const maxLoggedSoftware = 256

// validSoftwareName reports whether s is a client software name or version Apache Kafka accepts:
// ASCII letters and digits, with '-' and '.' allowed except first and last.
func validSoftwareName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		alnum := 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || ch != '-' && ch != '.') {
			return false
		}
	}
	return true
}

func unsupportedAPIVersions(int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = advertisedAPIs()
	return resp
}

// advertisedProduceMin is the lowest Produce version ApiVersions lists, below the lowest served (3,
// magic 2 batches; a request below that closes the connection, as on Apache 4.0). librdkafka decides
// whether a broker takes gzip, snappy and lz4 batches from a Produce range reaching below 3, and
// otherwise sends them uncompressed without a word; Apache 4.0 lists Produce 0-2 for the same reason
// while refusing them. Clients pick the highest version both sides list, so no client asks for them
// because of it.
const advertisedProduceMin = 0

func advertisedAPIs() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(supportedAPIs))
	for k, a := range supportedAPIs {
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MinVersion, ak.MaxVersion = k, a.min, a.max
		if k == produceKey {
			ak.MinVersion = advertisedProduceMin
		}
		keys = append(keys, ak)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}
