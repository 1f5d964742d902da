package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one figure: kgate's, its raw-Redis baseline's (when it has one) and their ratio.
type result struct {
	Phase       string   `json:"phase"`
	Case        string   `json:"case"`
	Metric      string   `json:"metric"`
	Unit        string   `json:"unit"`
	Kgate       float64  `json:"kgate"`
	Baseline    *float64 `json:"baseline,omitempty"`
	Ratio       *float64 `json:"ratio,omitempty"` // kgate / baseline
	KgateCPU    *cpuUse  `json:"kgate_cpu,omitempty"`
	BaselineCPU *cpuUse  `json:"baseline_cpu,omitempty"`
	Notes       string   `json:"notes,omitempty"`
	// RoundRatios are the ratios of each alternation (kgate run / the baseline run of the same round), for
	// throughput: the machine's drift between rounds shows in their spread.
	RoundRatios []float64 `json:"round_ratios,omitempty"`
}

// reporter collects results, streams them as JSON lines with --json and prints the table at the end.
type reporter struct {
	json    bool
	out     io.Writer // JSON lines
	table   io.Writer // the human table
	header  []string
	results []result
}

func newReporter(jsonOut bool) *reporter {
	r := &reporter{json: jsonOut, out: os.Stdout, table: os.Stdout}
	if jsonOut {
		r.table = os.Stderr
	}
	return r
}

func (r *reporter) emitJSON(v any) {
	if !r.json {
		return
	}
	buf, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain data is reported
	}
	fmt.Fprintln(r.out, string(buf))
}

// meta records a line of the run's description (machine, versions, settings).
func (r *reporter) meta(key, value string) {
	r.header = append(r.header, fmt.Sprintf("%-10s %s", key+":", value))
	r.emitJSON(map[string]string{"meta": key, "value": value})
}

// add records a result; baseline < 0 means there is none.
func (r *reporter) add(res result) {
	r.results = append(r.results, res)
	r.emitJSON(res)
	progress("%-8s %-22s %-14s %s", res.Phase, res.Case, res.Metric, fmtPair(res))
}

func fmtPair(res result) string {
	s := fmtNum(res.Kgate) + " " + res.Unit
	if res.Baseline != nil {
		s += " vs " + fmtNum(*res.Baseline) + " (ratio " + fmtRatio(res.Ratio) + ")"
	}
	return s
}

// withBaseline fills Baseline and Ratio.
func withBaseline(res result, base float64) result {
	res.Baseline = &base
	if base != 0 && !math.IsNaN(base) && !math.IsNaN(res.Kgate) {
		ratio := res.Kgate / base
		res.Ratio = &ratio
	}
	return res
}

// roundRatios is each round's rate through kgate over its baseline's (ks[i] against bs[i]).
func roundRatios[R any](ks, bs []R, rate func(R) float64) []float64 {
	var ratios []float64
	for i := range ks {
		ratios = appendRatio(ratios, rate(ks[i]), rate(bs[i]))
	}
	return ratios
}

// appendRatio appends kgate/base to ratios when it is a number (a round that measured nothing is left
// out: JSON has no Inf or NaN).
func appendRatio(ratios []float64, kgate, base float64) []float64 {
	r := kgate / base
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return ratios
	}
	return append(ratios, r)
}

// roundSpread describes per-round ratios for the table's notes: each one, then the median.
func roundSpread(ratios []float64) string {
	if len(ratios) < 2 {
		return ""
	}
	parts := make([]string, len(ratios))
	for i, r := range ratios {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	sorted := slices.Sorted(slices.Values(ratios))
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + median) / 2
	}
	return fmt.Sprintf("round ratios %s (median %.2f)", strings.Join(parts, "/"), median)
}

func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 1000:
		return groupThousands(fmt.Sprintf("%.0f", v))
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func groupThousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtRatio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *r)
}

func fmtCPU(u *cpuUse) string {
	if u == nil {
		return "-"
	}
	redis, other := "n/a", "n/a"
	if u.Redis != nil {
		redis = fmt.Sprintf("%.0f%%", *u.Redis)
	}
	if u.Other != nil {
		other = fmt.Sprintf("%.0f%%", *u.Other)
	}
	return fmt.Sprintf("%.0f%%/%s/%s", u.Proc, redis, other)
}

// print writes the description and the table.
func (r *reporter) print() {
	w := r.table
	fmt.Fprintln(w)
	for _, h := range r.header {
		fmt.Fprintln(w, h)
	}
	fmt.Fprintln(w, "cpu:       proc = this process (kgate + Kafka client, or the baseline's go-redis client), redis = redis-server, other = the rest of the machine (noise); % of one core over the run")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tCASE\tMETRIC\tKGATE\tBASELINE\tRATIO\tCPU KGATE proc/redis/other\tCPU BASE proc/redis/other\tNOTES")
	last := ""
	for _, res := range r.results {
		if last != "" && res.Phase != last {
			fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t")
		}
		last = res.Phase
		base := "-"
		if res.Baseline != nil {
			base = fmtNum(*res.Baseline)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", res.Phase, res.Case, res.Metric+" ("+res.Unit+")",
			fmtNum(res.Kgate), base, fmtRatio(res.Ratio), fmtCPU(res.KgateCPU), fmtCPU(res.BaselineCPU), res.Notes)
	}
	tw.Flush()
	r.printBottlenecks()
}

// printBottlenecks summarises, per phase, the CPU of each side during the kgate runs: redis-server is
// single-threaded, so near 100% it is the limit; this process can use the rest of the cores.
func (r *reporter) printBottlenecks() {
	type span struct{ lo, hi float64 }
	grow := func(s *span, v float64) {
		if s.lo == 0 && s.hi == 0 {
			s.lo, s.hi = v, v
			return
		}
		s.lo, s.hi = min(s.lo, v), max(s.hi, v)
	}
	var phases []string
	spans := map[string]*[3]span{}
	for _, res := range r.results {
		if res.KgateCPU == nil {
			continue
		}
		s := spans[res.Phase]
		if s == nil {
			s = &[3]span{}
			spans[res.Phase] = s
			phases = append(phases, res.Phase)
		}
		grow(&s[0], res.KgateCPU.Proc)
		if res.KgateCPU.Redis != nil {
			grow(&s[1], *res.KgateCPU.Redis)
		}
		if res.KgateCPU.Other != nil {
			grow(&s[2], *res.KgateCPU.Other)
		}
	}
	if len(phases) == 0 {
		return
	}
	fmt.Fprintln(r.table)
	fmt.Fprintln(r.table, "CPU during the kgate runs (% of one core; redis-server is single-threaded, so ~100% means Redis is the limit):")
	for _, p := range phases {
		s := spans[p]
		fmt.Fprintf(r.table, "  %-8s kgate+client %3.0f-%3.0f%%   redis-server %3.0f-%3.0f%%   other processes %3.0f-%3.0f%%\n",
			p, s[0].lo, s[0].hi, s[1].lo, s[1].hi, s[2].lo, s[2].hi)
	}
}

var startTime = time.Now()

// progress logs to stderr while the benchmark runs.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(startTime).Seconds(), fmt.Sprintf(format, args...))
}

// percentiles returns the given quantiles (0..1) of ds in milliseconds; ds is sorted in place.
func percentiles(ds []time.Duration, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(ds) == 0 {
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	for i, q := range qs {
		k := int(math.Ceil(q*float64(len(ds)))) - 1
		k = min(max(k, 0), len(ds)-1)
		out[i] = float64(ds[k]) / float64(time.Millisecond)
	}
	return out
}

// addCPUPerRecord reports the CPU each side spent per record: robust against other load on the
// machine, and where the work goes (this process vs redis-server).
func (r *reporter) addCPUPerRecord(phase, cs string, k cpuUse, kRecords float64, base cpuUse, baseRecords float64) {
	kp, kr := k.perRecord(kRecords)
	bp, br := base.perRecord(baseRecords)
	r.add(withBaseline(result{Phase: phase, Case: cs, Metric: "redis cpu/rec", Unit: "us", Kgate: kr}, br))
	r.add(withBaseline(result{Phase: phase, Case: cs, Metric: "proc cpu/rec", Unit: "us", Kgate: kp,
		Notes: "proc = kgate + franz-go client vs the go-redis client"}, bp))
}

// joinNums formats vs as "a/b/c" (fmtNum each).
func joinNums(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmtNum(v)
	}
	return strings.Join(parts, "/")
}
