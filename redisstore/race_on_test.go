//go:build race

package redisstore

// raceEnabled: the race detector is on, and sync.Pool drops a quarter of what it is handed, so tests
// of reuse expect less of it.
const raceEnabled = true
