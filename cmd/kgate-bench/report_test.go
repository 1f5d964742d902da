package main

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestRoundSpread: each round's ratio in order, then the median (the mean of the middle two for an
// even count); nothing for a single round.
func TestRoundSpread(t *testing.T) {
	for _, c := range []struct {
		ratios []float64
		want   string
	}{
		{nil, ""},
		{[]float64{0.8}, ""},
		{[]float64{0.9, 0.7, 0.8}, "round ratios 0.90/0.70/0.80 (median 0.80)"},
		{[]float64{1.0, 0.6, 0.8, 0.7}, "round ratios 1.00/0.60/0.80/0.70 (median 0.75)"},
	} {
		if got := roundSpread(c.ratios); got != c.want {
			t.Errorf("roundSpread(%v) = %q, want %q", c.ratios, got, c.want)
		}
	}
}

// TestAppendRatio: rounds that measured nothing leave no Inf or NaN behind (JSON cannot carry them).
func TestAppendRatio(t *testing.T) {
	var rs []float64
	rs = appendRatio(rs, 8, 10)
	rs = appendRatio(rs, 5, 0)
	rs = appendRatio(rs, 0, 0)
	if len(rs) != 1 || rs[0] != 0.8 {
		t.Fatalf("ratios %v, want [0.8]", rs)
	}
}

// TestLatencyRunPlus: rounds pool their samples; the delivered rate is weighted by measured time.
func TestLatencyRunPlus(t *testing.T) {
	a := latencyRun{lat: []time.Duration{1, 2}, achieved: 100, cpu: cpuUse{WallSec: 1}}
	b := latencyRun{lat: []time.Duration{3}, achieved: 400, cpu: cpuUse{WallSec: 3}}
	var sum latencyRun
	sum = sum.plus(a).plus(b)
	if len(sum.lat) != 3 || sum.achieved != 325 || sum.cpu.WallSec != 4 {
		t.Fatalf("sum %+v", sum)
	}
	if got := joinNums([]float64{1.234, 56.7}); got != "1.23/56.7" {
		t.Fatalf("joinNums: %q", got)
	}
}

// TestAlternate: kgate then baseline in each round, runs returned in order; the first error stops the
// case and names it.
func TestAlternate(t *testing.T) {
	var order []string
	run := func(side string) func(int) (consumeRun, error) {
		return func(round int) (consumeRun, error) {
			order = append(order, fmt.Sprint(side, round))
			return consumeRun{records: int64(round + 1)}, nil
		}
	}
	ks, bs, err := alternate("case", 3, run("k"), run("b"))
	if err != nil || fmt.Sprint(order) != "[k0 b0 b1 k1 k2 b2]" || len(ks) != 3 || len(bs) != 3 || total(ks).records != 6 || bs[1].records != 2 {
		t.Fatalf("order %v, runs %v %v, err %v", order, ks, bs, err)
	}
	order = nil
	if _, _, err := kgateThenBaseline("case", 2, run("k"), run("b")); err != nil || fmt.Sprint(order) != "[k0 b0 k1 b1]" {
		t.Fatalf("kgate then baseline: order %v, err %v", order, err)
	}
	_, _, err = alternate("case", 2, run("k"), func(int) (consumeRun, error) { return consumeRun{}, errors.New("down") })
	if err == nil || err.Error() != "case baseline: down" {
		t.Fatalf("error %v", err)
	}
	_, _, err = alternate("case", 2, func(int) (consumeRun, error) { return consumeRun{}, errors.New("down") }, run("b"))
	if err == nil || err.Error() != "case through kgate: down" {
		t.Fatalf("error %v", err)
	}
}

// A latency run's delivered rate is its records over their delivery span, but over no less than the
// time they were scheduled over: a burst after a stall is not faster than the schedule, falling behind
// is slower.
func TestDeliveryWindowRate(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name      string
		gotSpread time.Duration // between consecutive deliveries; 1,001 records scheduled over 1 s
		want      float64
	}{
		{"keeping up", ms, 1001},
		{"stall then burst", ms / 5, 1001},
		{"falling behind", 2 * ms, 500.5},
	} {
		var w deliveryWindow
		for i := range 1001 {
			w.add(400*ms + time.Duration(i)*c.gotSpread)
		}
		if got := w.rate(time.Second); got < c.want*0.99 || got > c.want*1.01 {
			t.Errorf("%s: %.0f rec/s, want %.0f", c.name, got, c.want)
		}
	}
}
