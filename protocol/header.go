package protocol

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// apiVersionsKey is ApiVersions, whose response header is always v0 so
// that a client can parse it before it knows which versions we speak.
const apiVersionsKey = 18

// RequestHeader is a parsed Kafka request header (v0, v1 or v2).
type RequestHeader struct {
	APIKey        int16
	APIVersion    int16
	CorrelationID int32
	// ClientID is "" when the client sent a null client id.
	ClientID string
	// Flexible reports request header v2 (KIP-482): a tag section follows
	// the client id, and the body uses compact encodings.
	Flexible bool
}

// ParseRequestHeader parses the request header at the start of frame and
// returns it with the body bytes that follow. Whether the header is flexible
// (v2) comes from kmsg for the key and version.
//
// For an API key kmsg does not know it returns the fixed fields and an error
// wrapping ErrUnknownAPIKey; the caller closes the connection. For a known
// key at a version above kmsg's maximum (or negative) it parses the header as
// non-flexible v1 and returns it with an error wrapping ErrUnsupportedVersion,
// so that ApiVersions can still be answered with UNSUPPORTED_VERSION: the
// client id is read the same in v1 and v2, and the body, tags included, is
// left unread. Any other error wraps ErrMalformedRequest.
func ParseRequestHeader(frame []byte) (RequestHeader, []byte, error) {
	var h RequestHeader
	if len(frame) < minRequestFrame {
		return h, nil, fmt.Errorf("%w: header needs %d bytes, have %d", ErrMalformedRequest, minRequestFrame, len(frame))
	}
	h.APIKey = int16(binary.BigEndian.Uint16(frame))
	h.APIVersion = int16(binary.BigEndian.Uint16(frame[2:]))
	h.CorrelationID = int32(binary.BigEndian.Uint32(frame[4:]))
	rest := frame[8:]

	v, ok := versionsFor(h.APIKey)
	if !ok {
		return h, rest, fmt.Errorf("%w: %d", ErrUnknownAPIKey, h.APIKey)
	}
	var verr error
	if h.APIVersion < 0 || h.APIVersion > v.max {
		verr = fmt.Errorf("%w: %s v%d (max v%d)", ErrUnsupportedVersion, kmsg.NameForKey(h.APIKey), h.APIVersion, v.max)
	} else {
		h.Flexible = v.flexibleFrom >= 0 && h.APIVersion >= v.flexibleFrom
	}

	// ControlledShutdown v0 is the one request that uses header v0,
	// which has no client id.
	if h.APIKey == 7 && h.APIVersion == 0 {
		return h, rest, nil
	}

	if len(rest) < 2 {
		return h, nil, fmt.Errorf("%w: client id length", ErrMalformedRequest)
	}
	n := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	switch {
	case n == -1: // null
	case n < 0 || int(n) > len(rest):
		return h, nil, fmt.Errorf("%w: client id length %d, %d bytes left", ErrMalformedRequest, n, len(rest))
	default:
		h.ClientID = string(rest[:n]) // copied: the frame buffer is reused
		rest = rest[n:]
	}
	if verr != nil {
		return h, rest, verr
	}

	if h.Flexible {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return h, nil, err
		}
	}
	return h, rest, nil
}

// apiVersions is what ParseRequestHeader needs to know of one API key:
// kmsg's maximum version and the first flexible version (-1: none).
type apiVersions struct {
	known        bool
	max          int16
	flexibleFrom int16
}

// apiTable caches apiVersions for keys below its length, so that parsing a
// header does not allocate a kmsg request to ask it. Kafka's keys are
// small; larger ones fall back to asking kmsg.
var apiTable = func() (t [256]apiVersions) {
	for k := range t {
		t[k] = lookupVersions(int16(k))
	}
	return t
}()

func versionsFor(key int16) (apiVersions, bool) {
	if key >= 0 && int(key) < len(apiTable) {
		v := apiTable[key]
		return v, v.known
	}
	v := lookupVersions(key)
	return v, v.known
}

// lookupVersions asks kmsg. Flexibility never goes away once a request
// gains it (KIP-482), so the first flexible version is enough.
func lookupVersions(key int16) apiVersions {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return apiVersions{}
	}
	v := apiVersions{known: true, max: req.MaxVersion(), flexibleFrom: -1}
	for ver := int16(0); ver <= v.max; ver++ {
		req.SetVersion(ver)
		if req.IsFlexible() {
			v.flexibleFrom = ver
			break
		}
	}
	return v
}

// skipTags skips a KIP-482 tag section: a uvarint count, then per tag a
// uvarint tag, a uvarint size and that many bytes.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, fmt.Errorf("%w: header tag count", ErrMalformedRequest)
	}
	b = b[n:]
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, fmt.Errorf("%w: header tag", ErrMalformedRequest)
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: header tag size", ErrMalformedRequest)
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// DecodeRequest returns the kmsg request for hdr, version set, with body
// (what ParseRequestHeader returned) read into it. Strings are copied; byte
// fields such as Produce's Records alias body. A body kmsg cannot read wraps
// ErrMalformedRequest; an unknown key or unsupported version wraps the same errors
// as ParseRequestHeader.
func DecodeRequest(hdr RequestHeader, body []byte) (kmsg.Request, error) {
	req := kmsg.RequestForKey(hdr.APIKey)
	if req == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownAPIKey, hdr.APIKey)
	}
	if hdr.APIVersion < 0 || hdr.APIVersion > req.MaxVersion() {
		return nil, fmt.Errorf("%w: %s v%d (max v%d)", ErrUnsupportedVersion, kmsg.NameForKey(hdr.APIKey), hdr.APIVersion, req.MaxVersion())
	}
	req.SetVersion(hdr.APIVersion)
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%w: %s v%d: %w", ErrMalformedRequest, kmsg.NameForKey(hdr.APIKey), hdr.APIVersion, err)
	}
	return req, nil
}

// AppendResponse appends a complete response frame to dst: the int32 size,
// the correlation id, the empty tag section of response header v1 when resp
// is flexible at its version (never for ApiVersions, whose response header
// is always v0), then resp's body. resp's version must already be set.
func AppendResponse(dst []byte, correlationID int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // size, patched below
	dst = binary.BigEndian.AppendUint32(dst, uint32(correlationID))
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		dst = append(dst, 0) // no tagged fields
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
