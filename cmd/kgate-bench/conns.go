package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The idle connections are opened by a child process (this binary, re-executed with connsChildEnv set
// to the gateway's address) so that this process's RSS grows by the gateway's share alone. The child
// reads "open N" lines on stdin, holds N connections in total and answers "ok <held> [error]"; it
// closes them and exits when stdin closes.
const connsChildEnv = "KGATE_BENCH_IDLE_CONNS_TO"

const probeTopic = "conns-probe"

func (b *bench) connsPhase(ctx context.Context) error {
	counts := slices.Sorted(slices.Values(b.o.conns))
	limit := raiseNoFile(uint64(counts[len(counts)-1]) + 4096)
	b.rep.meta("conns", fmt.Sprintf("idle connections opened by a child process, each sent one ApiVersions v3 request and read the answer; RSS = VmRSS of this process (gateway; no client connections) after runtime.GC + debug.FreeOSMemory; probe = one franz-go producer (linger 0, acks=-1) doing ProduceSync of 100 B records in a closed loop for %v; RLIMIT_NOFILE %d",
		b.o.connsProbe, limit))
	if err := b.createTopic(ctx, probeTopic, 1); err != nil {
		return err
	}
	var (
		probe0 []time.Duration
		err    error
	)
	labeled("client", func() { probe0, err = b.probeProduce(ctx) })
	if err != nil {
		return fmt.Errorf("probe without idle connections: %w", err)
	}
	p0 := percentiles(probe0, .5, .99)
	before := sampleMem()
	open0 := b.gw.OpenConnections()

	child, err := startConnsChild(b.addr)
	if err != nil {
		return err
	}
	defer child.stop()
	for _, n := range counts {
		held, cerr := child.open(n)
		if held == 0 {
			return fmt.Errorf("no idle connection could be opened: %v", cerr)
		}
		// The gateway counts a connection once it accepted it; the child's count is what it holds.
		deadline := time.Now().Add(30 * time.Second)
		for b.gw.OpenConnections() < open0+held {
			if time.Now().After(deadline) {
				return fmt.Errorf("gateway sees %d connections, the child holds %d", b.gw.OpenConnections()-open0, held)
			}
			time.Sleep(20 * time.Millisecond)
		}
		after := sampleMem()
		var probe []time.Duration
		labeled("client", func() { probe, err = b.probeProduce(ctx) })
		if err != nil {
			return fmt.Errorf("probe with %d idle connections: %w", held, err)
		}
		p := percentiles(probe, .5, .99)
		cs := fmt.Sprintf("%s idle", fmtNum(float64(held)))
		notes := fmt.Sprintf("RSS without idle connections %.1f MB", float64(before.rss)/1e6)
		if held < n {
			notes += fmt.Sprintf("; asked for %d, reached %d: %v", n, held, cerr)
		}
		perConn := float64(after.rss-before.rss) / float64(held) / 1024
		goPerConn := (float64(after.heapInuse+after.stackInuse) - float64(before.heapInuse+before.stackInuse)) / float64(held) / 1024
		b.rep.add(result{Phase: "conns", Case: cs, Metric: "RSS", Unit: "MB", Kgate: float64(after.rss) / 1e6, Notes: notes})
		b.rep.add(result{Phase: "conns", Case: cs, Metric: "RSS/conn", Unit: "KiB", Kgate: perConn,
			Notes: fmt.Sprintf("Go heap+stack in use %.1f KiB/conn; %.2f goroutines/conn", goPerConn,
				float64(after.goroutines-before.goroutines)/float64(held))})
		b.rep.add(withBaseline(result{Phase: "conns", Case: cs, Metric: "probe p50", Unit: "ms", Kgate: p[0],
			Notes: "baseline = same probe without idle connections"}, p0[0]))
		b.rep.add(withBaseline(result{Phase: "conns", Case: cs, Metric: "probe p99", Unit: "ms", Kgate: p[1],
			Notes: fmt.Sprintf("%d samples (%d without)", len(probe), len(probe0))}, p0[1]))
		if held < n {
			break
		}
	}
	return nil
}

// probeProduce is one active producer: ProduceSync in a closed loop, each record's latency.
func (b *bench) probeProduce(ctx context.Context) ([]time.Duration, error) {
	cl, err := kgo.NewClient(b.producerOpts(probeTopic, 0)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	value := randomBytes(100)
	for range 50 { // connect, producer id, warm caches
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			return nil, err
		}
	}
	var lats []time.Duration
	end := time.Now().Add(b.o.connsProbe)
	for time.Now().Before(end) {
		t := time.Now()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			return nil, err
		}
		lats = append(lats, time.Since(t))
	}
	return lats, nil
}

type connsChildProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	close sync.Once
}

func startConnsChild(addr string) (*connsChildProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), connsChildEnv+"="+addr)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start idle-connection child: %w", err)
	}
	return &connsChildProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// open asks the child to hold n connections; it returns how many it holds and why it stopped short.
func (c *connsChildProc) open(n int) (int, error) {
	if _, err := fmt.Fprintf(c.in, "open %d\n", n); err != nil {
		return 0, err
	}
	if !c.out.Scan() {
		return 0, fmt.Errorf("idle-connection child exited: %v", c.out.Err())
	}
	f := strings.SplitN(c.out.Text(), " ", 3)
	if len(f) < 2 || f[0] != "ok" {
		return 0, fmt.Errorf("idle-connection child: %q", c.out.Text())
	}
	held, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, fmt.Errorf("idle-connection child: %q", c.out.Text())
	}
	if len(f) == 3 && f[2] != "" {
		return held, fmt.Errorf("%s", f[2])
	}
	return held, nil
}

func (c *connsChildProc) stop() {
	c.close.Do(func() {
		c.in.Close()
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
		}
	})
}

// connsChild is the child process's main.
func connsChild(addr string) int {
	raiseNoFile(1 << 16)
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kgate-bench-idle", "1.0"
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("kgate-bench-idle")).AppendRequest(nil, req, 1)
	var conns []net.Conn
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "open "))
		if err != nil {
			fmt.Printf("bad %q\n", sc.Text())
			continue
		}
		msg := ""
		if err := openIdle(addr, frame, &conns, n); err != nil {
			msg = strings.ReplaceAll(err.Error(), "\n", " ")
		}
		fmt.Printf("ok %d %s\n", len(conns), msg)
	}
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// openIdle dials until conns holds n connections, 64 at a time; it stops at the first failure.
func openIdle(addr string, frame []byte, conns *[]net.Conn, n int) error {
	need := n - len(*conns)
	if need <= 0 {
		return nil
	}
	var (
		mu       sync.Mutex
		firstErr error
		failed   atomic.Bool
		left     atomic.Int64
		wg       sync.WaitGroup
	)
	left.Store(int64(need))
	for range min(64, need) {
		wg.Go(func() {
			for !failed.Load() && left.Add(-1) >= 0 {
				c, err := dialIdle(addr, frame)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					failed.Store(true)
				} else {
					*conns = append(*conns, c)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstErr
}

func dialIdle(addr string, frame []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(frame); err != nil {
		c.Close()
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("ApiVersions answer: %w", err)
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(size[:]))); err != nil {
		c.Close()
		return nil, fmt.Errorf("ApiVersions answer: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
