#!/usr/bin/env python3
"""kafka-python compatibility check, run by integration/kafkapython_test.go:

    python3 kafka_python_check.py <bootstrap host:port> <topic> <partitions> [count=12] [group=kafka-python-group] [timeout_s=60]

The topic must exist with <partitions> partitions. Steps:
  produce  count keyed records with headers, record i to partition i % partitions, all in one flush
           (linger_ms holds them back, so each partition gets one batch), acks=all; the producer's
           offsets must be dense from 0 per partition.
  group1   a consumer group (manual commits) reads every record from the beginning; offsets dense from
           0, keys, values and headers exact; it commits the middle offset of each partition and closes.
  group2   the group reopens, reads the commits back from the coordinator and must resume at them; it
           reads to the end, commits what it consumed (commit() with no arguments) and closes; a fresh
           consumer of the group reads that commit back.
  seek     a consumer without a group assigns partition 0, seeks into the middle of its batch and must
           read from exactly there to the end.

Prints one line "SUMMARY <json>" on stdout and exits 0 when every step succeeded, 1 otherwise (also
when timeout_s passes first). kafka-python's own log goes to stderr.
"""
import json
import logging
import os
import signal
import sys
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

CLIENT = "kgate-it-kafka-python"  # client ids: CLIENT + "-producer", "-group1", "-group2", "-verify", "-seek"

summary = {
    "ok": False,
    "error": None,
    "step": "start",
    "kafka_python": kafka.__version__,
    "api_version": None,  # the broker version kafka-python guessed from ApiVersions
    "produced": {},  # partition -> offsets the producer got back, in send order
    "group1": {},  # partition -> offsets read
    "committed1": {},  # partition -> committed offset read back after the first commit
    "group2_first": {},  # partition -> first offset the reopened group read
    "committed2": {},
    "seek": [],  # offsets read after the seek
}


def finish(err):
    if err is not None:
        summary["error"] = repr(err)
    summary["ok"] = err is None
    sys.stdout.write("SUMMARY " + json.dumps(summary, sort_keys=True) + "\n")
    sys.stdout.flush()
    # os._exit: kafka-python's background threads must not keep a failed run alive.
    os._exit(0 if err is None else 1)


class CheckError(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckError(f"{summary['step']}: {msg}")


def key(i):
    return b"k%02d" % i


def value(i):
    return b"v%02d-" % i + b"x" * i


def headers(i):
    return [("i", str(i).encode()), ("dup", b"a"), ("dup", b"b")]


def expect_record(r, parts):
    """Checks r is record i = offset * parts + partition, byte for byte; returns i."""
    i = r.offset * parts + r.partition
    check(r.key == key(i), f"{r.partition}/{r.offset}: key {r.key!r}, want {key(i)!r}")
    check(r.value == value(i), f"{r.partition}/{r.offset}: value {r.value!r}, want {value(i)!r}")
    check(list(r.headers) == headers(i), f"{r.partition}/{r.offset}: headers {r.headers!r}, want {headers(i)!r}")
    return i


def poll_until(consumer, done, deadline, on_record):
    """Polls consumer, handing each record to on_record, until done() or the deadline."""
    while not done():
        check(time.monotonic() < deadline, "timed out polling")
        for recs in consumer.poll(timeout_ms=500).values():
            for r in recs:
                on_record(r)


def main():
    if len(sys.argv) < 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    bootstrap, topic, parts = sys.argv[1], sys.argv[2], int(sys.argv[3])
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    group = sys.argv[5] if len(sys.argv) > 5 else "kafka-python-group"
    timeout_s = int(sys.argv[6]) if len(sys.argv) > 6 else 60
    signal.signal(signal.SIGALRM, lambda *_: finish(TimeoutError(f"timed out after {timeout_s}s in step {summary['step']}")))
    signal.alarm(timeout_s)
    deadline = time.monotonic() + timeout_s
    per = count // parts
    check(per >= 2 and per * parts == count, "count must be a multiple of partitions, at least 2 each")
    mid = per // 2
    tps = [TopicPartition(topic, p) for p in range(parts)]
    common = dict(bootstrap_servers=[bootstrap], request_timeout_ms=30000, api_version_auto_timeout_ms=10000)

    summary["step"] = "produce"
    producer = KafkaProducer(client_id=CLIENT + "-producer", acks="all", linger_ms=10000, **common)
    summary["api_version"] = ".".join(map(str, producer.config["api_version"]))
    futures = [(i, producer.send(topic, key=key(i), value=value(i), headers=headers(i), partition=i % parts)) for i in range(count)]
    producer.flush(timeout=30)
    for i, f in futures:
        md = f.get(timeout=30)
        summary["produced"].setdefault(str(md.partition), []).append(md.offset)
        check(md.partition == i % parts and md.offset == i // parts, f"record {i} at {md.partition}/{md.offset}, want {i % parts}/{i // parts}")
    producer.close(timeout=10)

    def group_consumer(name):
        return KafkaConsumer(
            topic, group_id=group, client_id=CLIENT + "-" + name, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=100,
            fetch_max_wait_ms=200, **common)

    summary["step"] = "group1"
    c = group_consumer("group1")
    seen = {p: [] for p in range(parts)}

    def on1(r):
        expect_record(r, parts)
        want = len(seen[r.partition])
        check(r.offset == want, f"partition {r.partition}: offset {r.offset}, want {want} (dense from 0)")
        seen[r.partition].append(r.offset)

    poll_until(c, lambda: all(len(v) == per for v in seen.values()), deadline, on1)
    # Stay in the group for a few heartbeat intervals (100 ms), so Heartbeat is spoken too: the first
    # goes out only after the member has been stable for one.
    stay = time.time() + 0.5
    while time.time() < stay:
        check(not c.poll(timeout_ms=50), "records past the end of the partitions")
    summary["group1"] = {str(p): v for p, v in seen.items()}
    c.commit({tp: OffsetAndMetadata(mid, "") for tp in tps})
    cached = {str(tp.partition): c.committed(tp) for tp in tps}  # the consumer's own record of it
    check(all(v == mid for v in cached.values()), f"committed (cached) {cached}, want {mid} each")
    c.close(autocommit=False)

    summary["step"] = "group2"
    c = group_consumer("group2")
    # Not assigned yet, so committed() asks the coordinator (OffsetFetch).
    summary["committed1"] = {str(tp.partition): c.committed(tp) for tp in tps}
    check(all(v == mid for v in summary["committed1"].values()), f"committed {summary['committed1']}, want {mid} each")
    nxt = {}

    def on2(r):
        expect_record(r, parts)
        if r.partition not in nxt:
            summary["group2_first"][str(r.partition)] = r.offset
            check(r.offset == mid, f"partition {r.partition}: resumed at {r.offset}, want the committed {mid}")
        else:
            check(r.offset == nxt[r.partition], f"partition {r.partition}: offset {r.offset} after {nxt[r.partition] - 1}")
        nxt[r.partition] = r.offset + 1

    poll_until(c, lambda: len(nxt) == parts and all(n == per for n in nxt.values()), deadline, on2)
    c.commit()
    c.close(autocommit=False)
    # A group member that never subscribes: committed() asks the coordinator.
    c = KafkaConsumer(group_id=group, client_id=CLIENT + "-verify", enable_auto_commit=False, **common)
    summary["committed2"] = {str(tp.partition): c.committed(tp) for tp in tps}
    check(all(v == per for v in summary["committed2"].values()), f"committed {summary['committed2']}, want {per} each")
    c.close(autocommit=False)

    summary["step"] = "seek"
    c = KafkaConsumer(client_id=CLIENT + "-seek", group_id=None, enable_auto_commit=False, fetch_max_wait_ms=200, **common)
    c.assign([tps[0]])
    c.seek(tps[0], mid)
    got = []

    def on3(r):
        expect_record(r, parts)
        got.append(r.offset)

    poll_until(c, lambda: len(got) >= per - mid, deadline, on3)
    summary["seek"] = got
    check(got == list(range(mid, per)), f"after seek to {mid}: offsets {got}, want {list(range(mid, per))}")
    c.close()
    summary["step"] = "done"


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        main()
    except BaseException as e:  # noqa: BLE001 - every failure must end in the summary line
        finish(e)
    finish(None)
