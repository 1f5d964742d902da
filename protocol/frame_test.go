package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func sizePrefixed(size int32, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(size)), body...)
}

func TestReadFrame(t *testing.T) {
	body8 := []byte{0, 18, 0, 3, 0, 0, 0, 1}
	tests := []struct {
		name    string
		in      []byte
		max     int32
		want    []byte
		wantErr error
	}{
		{"smallest request", sizePrefixed(8, body8), 0, body8, nil},
		{"exactly max", sizePrefixed(8, body8), 8, body8, nil},
		{"above max", sizePrefixed(9, append(body8, 0)), 8, nil, ErrFrameTooLarge},
		{"above default max", sizePrefixed(DefaultMaxFrameBytes+1, nil), 0, nil, ErrFrameTooLarge},
		{"negative", sizePrefixed(-1, nil), 0, nil, ErrFrameTooSmall},
		{"min int32", sizePrefixed(-1<<31, nil), 0, nil, ErrFrameTooSmall},
		{"zero", sizePrefixed(0, nil), 0, nil, ErrFrameTooSmall},
		{"seven", sizePrefixed(7, body8[:7]), 0, nil, ErrFrameTooSmall},
		{"clean close", nil, 0, nil, io.EOF},
		{"close in size", []byte{0, 0}, 0, nil, io.ErrUnexpectedEOF},
		{"close in body", sizePrefixed(8, body8[:5]), 0, nil, io.ErrUnexpectedEOF},
		{"close in body after size", sizePrefixed(8, nil), 0, nil, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(tt.in), nil, tt.max)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && !bytes.Equal(got, tt.want) {
				t.Fatalf("body = %x, want %x", got, tt.want)
			}
		})
	}
}

func TestReadFrameReusesBuffer(t *testing.T) {
	var stream []byte
	bodies := [][]byte{
		bytes.Repeat([]byte{1}, 100),
		bytes.Repeat([]byte{2}, 10),
		bytes.Repeat([]byte{3}, 3<<20+7), // larger than frameGrowStep: grows in steps
		bytes.Repeat([]byte{4}, 50),
	}
	for _, b := range bodies {
		stream = append(stream, sizePrefixed(int32(len(b)), b)...)
	}
	r := bytes.NewReader(stream)
	var buf []byte
	for i, want := range bodies {
		got, err := ReadFrame(r, buf, 0)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d: wrong body (len %d, want %d)", i, len(got), len(want))
		}
		if i == 1 && &got[0] != &buf[0] {
			t.Fatalf("frame %d: buffer not reused", i)
		}
		buf = got
	}
	if _, err := ReadFrame(r, buf, 0); err != io.EOF {
		t.Fatalf("after last frame: err = %v, want io.EOF", err)
	}
}

// A peer that claims a huge frame and sends little must not make us
// allocate the claimed size.
func TestReadFrameAllocatesWithData(t *testing.T) {
	in := sizePrefixed(DefaultMaxFrameBytes, bytes.Repeat([]byte{9}, 1000))
	got, err := ReadFrame(bytes.NewReader(in), nil, 0)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(got) > 2*frameGrowStep {
		t.Fatalf("allocated %d bytes for 1000 received", cap(got))
	}
}

func TestReadFrameNoAllocs(t *testing.T) {
	frame := sizePrefixed(64, make([]byte, 64))
	r := bytes.NewReader(frame)
	buf := make([]byte, 0, 128)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(frame)
		var err error
		if buf, err = ReadFrame(r, buf, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReadFrame allocated %v times per frame", allocs)
	}
}
