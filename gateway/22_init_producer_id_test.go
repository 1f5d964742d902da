package gateway

import (
	"math"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// TestInitProducerIDEpochs: an existing producer's epoch is bumped; an exhausted one (32766 and up,
// as Apache counts) gets a fresh producer ID with epoch 0, never a negative epoch; exactly one of the
// producer ID and epoch -1 is INVALID_REQUEST, as on Apache.
func TestInitProducerIDEpochs(t *testing.T) {
	ctx, g, _ := embeddedGateway(t, Config{})
	c := &conn{g: g}
	const pid = 1 << 40 // above any ID the store's counter gives here
	for _, tc := range []struct {
		name       string
		id         int64
		epoch      int16
		wantCode   int16
		wantSameID bool
		wantEpoch  int16
	}{
		{"new producer", -1, -1, 0, false, 0},
		{"bump", pid, 7, 0, true, 8},
		{"last bump", pid, math.MaxInt16 - 2, 0, true, math.MaxInt16 - 1},
		{"exhausted", pid, math.MaxInt16 - 1, 0, false, 0},
		{"past exhausted", pid, math.MaxInt16, 0, false, 0},
		{"id without epoch", pid, -1, kerr.InvalidRequest.Code, false, -1},
		{"epoch without id", -1, 3, kerr.InvalidRequest.Code, false, -1},
	} {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version = 4
		req.ProducerID, req.ProducerEpoch = tc.id, tc.epoch
		r, err := c.initProducerID(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := r.(*kmsg.InitProducerIDResponse)
		switch {
		case resp.ErrorCode != tc.wantCode:
			t.Errorf("%s: error %d, want %d", tc.name, resp.ErrorCode, tc.wantCode)
		case resp.ProducerEpoch != tc.wantEpoch:
			t.Errorf("%s: epoch %d, want %d", tc.name, resp.ProducerEpoch, tc.wantEpoch)
		case tc.wantCode != 0 && resp.ProducerID != -1:
			t.Errorf("%s: producer id %d with an error, want -1", tc.name, resp.ProducerID)
		case tc.wantCode == 0 && (resp.ProducerID == pid) != tc.wantSameID:
			t.Errorf("%s: producer id %d (request %d), want the same: %v", tc.name, resp.ProducerID, tc.id, tc.wantSameID)
		case tc.wantCode == 0 && resp.ProducerID < 0:
			t.Errorf("%s: producer id %d", tc.name, resp.ProducerID)
		}
	}
}

// TestInitProducerIDRedisDown: without Redis no producer ID can be given, and the answer is
// COORDINATOR_LOAD_IN_PROGRESS, which clients retry as it is (Apache's answer when it has no ID block).
func TestInitProducerIDRedisDown(t *testing.T) {
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{CommandTimeout: 300 * time.Millisecond})
	c := &conn{g: New(Config{}, store, zerolog.Nop())}
	m.Close()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = 4
	req.ProducerID, req.ProducerEpoch = -1, -1
	r, err := c.initProducerID(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp := r.(*kmsg.InitProducerIDResponse); resp.ErrorCode != kerr.CoordinatorLoadInProgress.Code || resp.ProducerID != -1 {
		t.Fatalf("error %d producer id %d; want COORDINATOR_LOAD_IN_PROGRESS and -1", resp.ErrorCode, resp.ProducerID)
	}
}
