// kafkajs compatibility check, run by integration/kafkajs_test.go:
//
//   node kafkajs_check.js <bootstrap host:port> <topic> [count=12] [group=kafkajs-group] [timeoutMs=60000]
//
// Produces count keyed records with headers and timestamps to the (existing) topic, record i to
// partition i % partitions, in two sends (the second gzip-compressed), acks=all; consumes them with a
// consumer group from the beginning, commits the next offsets explicitly and reads them back with the
// admin client; waits for a group heartbeat before leaving. Prints one JSON summary on stdout and exits 0 when every step succeeded, 1 otherwise
// (also when timeoutMs passes first). kafkajs's own log goes to stderr.
'use strict'

const { Kafka, logLevel, CompressionTypes, Partitioners } = require('kafkajs')

const [bootstrap, topic, countArg, groupArg, timeoutArg] = process.argv.slice(2)
if (!bootstrap || !topic) {
  process.stderr.write('usage: node kafkajs_check.js <bootstrap> <topic> [count] [group] [timeoutMs]\n')
  process.exit(2)
}
const count = Number(countArg || 12)
const groupId = groupArg || 'kafkajs-group'
const timeoutMs = Number(timeoutArg || 60000)
const baseTs = 1700000000000

const summary = {
  ok: false,
  error: null,
  step: 'start',
  partitions: 0,
  produced: [], // per send, per partition: { partition, baseOffset, errorCode }
  consumed: [], // { partition, offset, key, value, headers, timestamp }
  committed: {}, // partition -> offset, as fetched back by the admin client
  heartbeats: 0, // successful group heartbeats
}

let finished = false
function finish (err) {
  if (finished) return
  finished = true
  if (err) summary.error = String((err && err.stack) || err)
  summary.ok = !err
  process.stdout.write(JSON.stringify(summary) + '\n', () => process.exit(err ? 1 : 0))
}
setTimeout(() => finish(new Error(`timed out after ${timeoutMs} ms in step ${summary.step}`)), timeoutMs).unref()

const logCreator = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
}

const kafka = new Kafka({
  clientId: 'kgate-it-kafkajs',
  brokers: [bootstrap],
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { initialRetryTime: 100, retries: 5 },
  logLevel: logLevel.INFO,
  logCreator,
})

function headerValue (v) {
  if (Array.isArray(v)) return v.map(headerValue)
  return v === null || v === undefined ? null : v.toString()
}

function record (i, partitions) {
  return {
    partition: i % partitions,
    key: `k${String(i).padStart(2, '0')}`,
    value: `v${String(i).padStart(2, '0')}-` + 'x'.repeat(i),
    timestamp: String(baseTs + i * 1000),
    headers: { i: String(i), dup: ['a', 'b'] },
  }
}

async function main () {
  const admin = kafka.admin()
  const producer = kafka.producer({ allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner })
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 6000,
    heartbeatInterval: 500,
    rebalanceTimeout: 10000,
    maxWaitTimeInMs: 300,
    retry: { initialRetryTime: 100, retries: 5 },
  })

  summary.step = 'metadata'
  await admin.connect()
  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  const partitions = md.topics[0].partitions.length
  summary.partitions = partitions

  summary.step = 'produce'
  await producer.connect()
  const half = Math.floor(count / 2)
  const sends = [
    { from: 0, to: half, compression: CompressionTypes.None },
    { from: half, to: count, compression: CompressionTypes.GZIP },
  ]
  for (const s of sends) {
    const messages = []
    for (let i = s.from; i < s.to; i++) messages.push(record(i, partitions))
    const res = await producer.send({ topic, acks: -1, compression: s.compression, messages })
    summary.produced.push(res.map(r => ({ partition: r.partition, baseOffset: r.baseOffset, errorCode: r.errorCode })))
  }
  await producer.disconnect()

  summary.step = 'consume'
  // Heartbeats (v3) go out between fetches once heartbeatInterval has passed; the check waits for one.
  let heartbeat
  const heartbeatSeen = new Promise(resolve => { heartbeat = resolve })
  consumer.on(consumer.events.HEARTBEAT, () => { summary.heartbeats++; heartbeat() })
  // A crash kafkajs will not recover from by itself ends the check at once instead of at the timeout.
  consumer.on(consumer.events.CRASH, e => { if (!e.payload.restart) finish(e.payload.error) })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const seen = new Set()
  const next = {} // partition -> next offset to commit
  let allConsumed
  const done = new Promise(resolve => { allConsumed = resolve })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      summary.consumed.push({
        partition,
        offset: message.offset,
        key: message.key === null ? null : message.key.toString(),
        value: message.value === null ? null : message.value.toString(),
        headers: Object.fromEntries(Object.entries(message.headers || {}).map(([k, v]) => [k, headerValue(v)])),
        timestamp: message.timestamp,
      })
      seen.add(`${partition}/${message.offset}`)
      const n = Number(message.offset) + 1
      if (!(partition in next) || n > next[partition]) next[partition] = n
      if (seen.size >= count) allConsumed()
    },
  })
  await done
  summary.step = 'heartbeat'
  await heartbeatSeen

  summary.step = 'commit'
  await consumer.commitOffsets(Object.entries(next).map(([partition, offset]) => ({ topic, partition: Number(partition), offset: String(offset) })))
  summary.step = 'disconnect'
  await consumer.disconnect()

  summary.step = 'fetchOffsets'
  const offs = await admin.fetchOffsets({ groupId, topics: [topic] })
  for (const p of offs[0].partitions) summary.committed[p.partition] = p.offset
  await admin.disconnect()
  summary.step = 'done'
}

main().then(() => finish(null), err => finish(err))
