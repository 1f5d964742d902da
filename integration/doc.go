// Package integration holds kgate's end-to-end tests: real redis-server processes (standalone and a
// 3-master Redis Cluster, started once per test run on 127.0.0.1) behind real gateways, driven by real
// Kafka clients (franz-go kgo/kadm, Sarama, kafka-go, kcat, kafkajs from js/, kafka-python from py/). The
// tests live in _test.go files; this package has no production code.
package integration
