package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on every Linux ABI Go supports).
const clockTick = 100

// cpuMark is a point in time with the CPU this process and redis-server had used by then.
type cpuMark struct {
	at       time.Time
	self     time.Duration
	redis    time.Duration
	redisErr bool
	busy     time.Duration // the whole machine's, from /proc/stat
	busyErr  bool
}

// cpuUse is CPU over a run: percentages of one core (200 is both cores of a 2-core machine) and the
// seconds behind them.
type cpuUse struct {
	Proc     float64  `json:"proc_pct"`            // this process: kgate + client (or the baseline client)
	Redis    *float64 `json:"redis_pct,omitempty"` // redis-server; absent when its /proc entry is not readable
	Other    *float64 `json:"other_pct,omitempty"` // every other process on the machine: noise in the figures
	ProcSec  float64  `json:"proc_s"`              // CPU seconds of this process
	RedisSec *float64 `json:"redis_s,omitempty"`   // CPU seconds of redis-server
	WallSec  float64  `json:"wall_s"`
}

func (b *bench) markCPU() cpuMark {
	m := cpuMark{at: time.Now(), self: selfCPU()}
	m.redis, m.redisErr = procCPU(b.redisPID)
	m.busy, m.busyErr = machineBusy()
	return m
}

// cpuSince is the CPU used from m until now.
func (b *bench) cpuSince(m cpuMark) cpuUse {
	n := b.markCPU()
	wall := n.at.Sub(m.at).Seconds()
	self := (n.self - m.self).Seconds()
	u := cpuUse{Proc: 100 * self / wall, ProcSec: self, WallSec: wall}
	var redis float64
	if !m.redisErr && !n.redisErr {
		redis = (n.redis - m.redis).Seconds()
		r := 100 * redis / wall
		u.Redis, u.RedisSec = &r, &redis
	}
	if !m.busyErr && !n.busyErr {
		o := max(100*((n.busy-m.busy).Seconds()-self-redis)/wall, 0)
		u.Other = &o
	}
	return u
}

// plus is the CPU use of two measured windows taken together.
func (u cpuUse) plus(v cpuUse) cpuUse {
	if u.WallSec == 0 {
		return v
	}
	wall := u.WallSec + v.WallSec
	w := cpuUse{ProcSec: u.ProcSec + v.ProcSec, WallSec: wall}
	w.Proc = 100 * w.ProcSec / wall
	if u.RedisSec != nil && v.RedisSec != nil {
		rs := *u.RedisSec + *v.RedisSec
		r := 100 * rs / wall
		w.Redis, w.RedisSec = &r, &rs
	}
	if u.Other != nil && v.Other != nil {
		o := (*u.Other*u.WallSec + *v.Other*v.WallSec) / wall
		w.Other = &o
	}
	return w
}

// perRecord is CPU microseconds per record of this process and of redis-server (NaN when unknown).
func (u cpuUse) perRecord(records float64) (proc, redis float64) {
	proc, redis = math.NaN(), math.NaN()
	if records <= 0 {
		return
	}
	proc = u.ProcSec / records * 1e6
	if u.RedisSec != nil {
		redis = *u.RedisSec / records * 1e6
	}
	return
}

// machineBusy is the non-idle CPU time of the whole machine (first line of /proc/stat).
func machineBusy() (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, true
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
	if len(f) < 9 || f[0] != "cpu" {
		return 0, true
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, true
		}
		busy += v
	}
	return time.Duration(busy) * time.Second / clockTick, false
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads utime+stime of pid from /proc/<pid>/stat; it reports true when it cannot.
func procCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, true
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, true
	}
	// The command name (field 2) may hold spaces; fields are counted after its closing parenthesis.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, true
	}
	f := strings.Fields(string(raw[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, true
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, true
	}
	return time.Duration(ut+st) * time.Second / clockTick, false
}

// memSample is this process's resident set and the Go runtime's view, after a GC that also returned
// freed memory to the OS (so the RSS difference between two samples is memory still in use).
type memSample struct {
	rss        int64
	heapInuse  uint64
	stackInuse uint64
	goroutines int
}

func sampleMem() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{rss: vmRSS(), heapInuse: ms.HeapInuse, stackInuse: ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

// vmRSS reads VmRSS from /proc/self/status, in bytes (-1 when unavailable).
func vmRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// raiseNoFile lifts RLIMIT_NOFILE to at least want open files (the hard limit too when permitted). It
// returns the soft limit in force afterwards.
func raiseNoFile(want uint64) uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur >= want {
		return rl.Cur
	}
	nl := rl
	nl.Cur = want
	if nl.Max < want {
		nl.Max = want
	}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl) != nil {
		// Not allowed to raise the hard limit: take what it allows.
		nl = rl
		nl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	return rl.Cur
}

// cpuModel is the "model name" of /proc/cpuinfo.
func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
