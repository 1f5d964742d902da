package gateway

// ApiVersions v0-v3.
//
// Advertises supportedAPIs. A request at a version kgate does not know is answered, as Apache Kafka
// does, with UNSUPPORTED_VERSION in a v0-shaped response listing the supported ranges, so the client
// can retry at a version both sides speak. The response header is never the flexible one (KIP-511).
// v3's client software name and version are recorded for the connection log only.

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) apiVersions(_ context.Context, req *kmsg.ApiVersionsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.ApiKeys = advertisedAPIs()
	if req.Version >= 3 && req.ClientSoftwareName != "" {
		c.log = c.log.With().Str("client_software", req.ClientSoftwareName+"/"+req.ClientSoftwareVersion).Logger()
	}
	return resp, nil
}

func unsupportedAPIVersions(int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = advertisedAPIs()
	return resp
}

func advertisedAPIs() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(supportedAPIs))
	for k, a := range supportedAPIs {
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MinVersion, ak.MaxVersion = k, a.min, a.max
		keys = append(keys, ak)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}
