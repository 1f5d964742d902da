package gateway

import (
	"testing"
	"time"

	"github.com/kgate/kgate/coordinator"
)

// The broker's group settings are reported as the coordinator applies them: an unset initial
// rebalance delay is the 3 s default, a negative one (kgate's "none", a configured 0) is 0.
func TestBrokerConfigsReportGroupSettingsInEffect(t *testing.T) {
	for _, c := range []struct {
		delay time.Duration
		want  string
	}{{0, "3000"}, {-1, "0"}, {250 * time.Millisecond, "250"}} {
		_, g, _ := embeddedGateway(t, Config{Groups: coordinator.Config{InitialRebalanceDelay: c.delay}})
		got := map[string]string{}
		for _, kv := range g.brokerConfigs() {
			got[kv[0]] = kv[1]
		}
		if got["group.initial.rebalance.delay.ms"] != c.want || got["group.min.session.timeout.ms"] != "6000" {
			t.Errorf("delay %v: initial rebalance delay %q, min session timeout %q; want %s and 6000",
				c.delay, got["group.initial.rebalance.delay.ms"], got["group.min.session.timeout.ms"], c.want)
		}
	}
}
