// Package gateway is kgate's Kafka endpoint: the listener, one read loop per connection, the table of
// supported APIs that ApiVersions, version checks and dispatch all read, one file per Kafka API key
// (named <key>_<api>.go, each opening with its versions, behaviour and deviations from Apache Kafka),
// and the admin HTTP API.
//
// Kafka error codes are response data; a handler returns a Go error only when the connection cannot go
// on (the gateway then closes it). Store failures are mapped to retriable Kafka codes in errors.go.
package gateway
