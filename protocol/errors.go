package protocol

import "errors"

// Every error this package returns is, or wraps with %w, one of these, so
// callers can classify with errors.Is. All of them mean the peer sent
// something kgate cannot use; the frame errors and ErrUnknownAPIKey also mean
// the connection cannot go on.
var (
	// ErrFrameTooLarge is a frame whose size prefix exceeds the maximum.
	ErrFrameTooLarge = errors.New("protocol: frame too large")
	// ErrFrameTooSmall is a frame whose size prefix is negative or smaller
	// than the smallest request header.
	ErrFrameTooSmall = errors.New("protocol: frame too small")
	// ErrMalformedRequest is a request header or body that ends early or
	// that kmsg cannot read.
	ErrMalformedRequest = errors.New("protocol: malformed request")
	// ErrUnknownAPIKey is a request for an API key kmsg does not know.
	ErrUnknownAPIKey = errors.New("protocol: unknown api key")
	// ErrUnsupportedVersion is a request version above what kmsg supports.
	ErrUnsupportedVersion = errors.New("protocol: unsupported api version")

	// ErrCorruptBatch is a record batch whose lengths, counts or records
	// do not add up.
	ErrCorruptBatch = errors.New("protocol: corrupt record batch")
	// ErrBadCRC is a record batch whose CRC-32C does not match its bytes.
	ErrBadCRC = errors.New("protocol: record batch crc mismatch")
	// ErrUnsupportedMagic is a message set older than magic 2.
	ErrUnsupportedMagic = errors.New("protocol: unsupported record batch magic")
	// ErrUnsupportedCompression is a compression codec other than none,
	// gzip, snappy, lz4 or zstd.
	ErrUnsupportedCompression = errors.New("protocol: unsupported compression codec")
	// ErrBatchTooLarge is a compressed batch that decompresses to more than
	// the caller's limit.
	ErrBatchTooLarge = errors.New("protocol: decompressed batch too large")
)
