package redisstore

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// fanOut runs functions on goroutines of their own for a caller that does part of the work itself,
// and carries the first panic of any of them to the caller's goroutine when it waits (Wait): a caller
// that recovers its own panics (a client connection, which closes and leaves the gateway serving the
// others) recovers those too, where a panic on a goroutine of its own ended the process. Deferred,
// Wait also keeps a panic of the caller's own share from unwinding while the goroutines still use
// what the caller shares with them.
type fanOut struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	first string // the first panic's value and stack
}

// Go runs f on a goroutine of its own.
func (fo *fanOut) Go(f func()) {
	fo.wg.Go(func() {
		defer func() {
			if p := recover(); p != nil {
				fo.mu.Lock()
				if fo.first == "" {
					fo.first = fmt.Sprintf("%v (on a goroutine of the store's, with its stack:)\n%s", p, debug.Stack())
				}
				fo.mu.Unlock()
			}
		}()
		f()
	})
}

// Wait waits for every goroutine started by Go, then panics with the first panic any of them raised
// (once: a second Wait, deferred, finds it raised).
func (fo *fanOut) Wait() {
	fo.wg.Wait()
	if p := fo.first; p != "" {
		fo.first = ""
		panic(p)
	}
}
