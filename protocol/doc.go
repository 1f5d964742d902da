// Package protocol is kgate's Kafka wire layer: size-prefixed frames with a
// maximum, request and response headers on top of kmsg, and the record batch
// v2 codec (CRC-32C, gzip, snappy, lz4, zstd).
//
// It knows nothing about Redis, topics or groups and imports no other kgate
// package. Everything here sits on the gateway's hot paths, so the decoders
// alias their input instead of copying it and the Fetch encoder (AppendBatch)
// writes straight into the caller's buffer without allocating.
//
// # Scope
//
//   - Frames: ReadFrame reads one int32-size-prefixed frame, rejecting sizes
//     that are negative, too small for a request header, or above a maximum.
//     A frame error means the connection must be closed.
//   - Headers: ParseRequestHeader reads request header v0, v1 or v2; whether
//     a request uses the flexible header v2 comes from kmsg. AppendResponse
//     writes response header v0 or v1; ApiVersions (key 18) always uses v0,
//     as Kafka does, so a client can read it before it knows our versions.
//   - Record batches: DecodeBatches reads magic 2 batches as Produce carries
//     them; AppendBatch writes an uncompressed magic 2 batch for Fetch;
//     AppendCompressedBatch writes any codec (tests, benchmarks, tools).
//
// # Left out
//
//   - Magic 0 and 1 message sets (pre Kafka 0.11): DecodeBatches returns
//     ErrUnsupportedMagic. Every client kgate supports speaks magic 2.
//   - Request header tagged fields are skipped, not returned; no Kafka
//     version defines one a broker must read.
//   - AppendBatch writes no compression: Fetch responses go out uncompressed.
//
// # Aliasing
//
// Records returned by DecodeBatches point into the data passed in (for
// uncompressed batches) or into a buffer owned by the batch (for compressed
// ones). ReadFrame reuses its buffer, so a caller must be done with the
// records of one frame, or copy them, before it reads the next frame into the
// same buffer.
package protocol
