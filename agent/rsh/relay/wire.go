package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The frames of the protocol: one type byte, a big-endian uint32 payload
// length, the payload. A session is
//
//	relay -> launcher  Open (with the descriptors)
//	launcher -> relay  Accept, and the command runs (or Refuse: nothing ran)
//	relay -> launcher  Signal, any number of times
//	launcher -> relay  Exit
//
// A relay falls back to a connection of its own only when it knows nothing
// ran: it could not send Open, the launcher refused, or closed the socket
// before it answered. One that gets no answer in time exits 255 instead, so
// that a command never runs twice.
const (
	FrameOpen   byte = 1  // relay: the request (EncodeOpen), descriptors attached
	FrameSignal byte = 3  // relay: one byte, the number of a signal it received
	FrameAccept byte = 11 // launcher: the descriptors are taken
	FrameRefuse byte = 12 // launcher: not served, the payload says why; nothing ran
	FrameExit   byte = 13 // launcher: one byte, the status to exit with
)

// HeaderSize is the size of a frame header.
const HeaderSize = 5

// MaxFrame bounds a frame's payload, read and written: an Open carries the
// command line, and Linux bounds a process's arguments and environment
// together at a quarter of its stack limit (2 MiB by default).
const MaxFrame = 4 << 20

// magic starts every Open: the protocol and its version (2: the Open
// carries the run's token).
const magic = "podmpi-rsh/2\x00"

// Stream says how one of the relay's stdin, stdout and stderr travels.
type Stream byte

// Streams.
const (
	// StreamFD: the descriptor is attached to the Open, in stdin, stdout,
	// stderr order.
	StreamFD Stream = iota
	// StreamNull: /dev/null or closed. Nothing is attached: stdin reads
	// nothing, output is discarded.
	StreamNull
	// StreamStdout (stderr only): the same pipe or socket as stdout, which
	// is attached once.
	StreamStdout
)

// Open is a relay's request.
type Open struct {
	// Token is the run's token (EnvToken) as the relay found it in its
	// environment: the launcher serves only a request that carries its
	// own.
	Token string
	// Args are the client's arguments without argv[0], as mpirun passed
	// them.
	Args []string
	// Env are the variables the client reads (SentEnv), KEY=VALUE.
	Env []string
	// Stdio says how stdin, stdout and stderr travel.
	Stdio [3]Stream
}

// FDs is how many descriptors travel with o.
func (o Open) FDs() int {
	n := 0
	for _, s := range o.Stdio {
		if s == StreamFD {
			n++
		}
	}
	return n
}

// EncodeOpen encodes o as the payload of an Open frame.
func EncodeOpen(o Open) []byte {
	n := len(magic) + 3 + 4 + len(o.Token) + 8
	for _, list := range [][]string{o.Args, o.Env} {
		for _, s := range list {
			n += 4 + len(s)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, magic...)
	for _, s := range o.Stdio {
		b = append(b, byte(s))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(o.Token)))
	b = append(b, o.Token...)
	for _, list := range [][]string{o.Args, o.Env} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(list)))
		for _, s := range list {
			b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
	}
	return b
}

// DecodeOpen parses an Open frame's payload. Every length is checked
// against what remains, so a hostile payload costs at most its own size.
func DecodeOpen(p []byte) (Open, error) {
	var o Open
	rest, ok := strings.CutPrefix(string(p), magic)
	if !ok {
		return o, errors.New("relay: not a podmpi-rsh request (or another version of it)")
	}
	if len(rest) < 3 {
		return o, errors.New("relay: request too short")
	}
	for i := range o.Stdio {
		s := Stream(rest[i])
		switch {
		case s > StreamStdout:
			return o, fmt.Errorf("relay: unknown stream mode %d", s)
		case s == StreamStdout && i != 2:
			return o, errors.New("relay: only stderr can share stdout's descriptor")
		case s == StreamStdout && o.Stdio[1] != StreamFD:
			return o, errors.New("relay: stderr shares a stdout that was not sent")
		}
		o.Stdio[i] = s
	}
	rest = rest[3:]
	var err error
	if o.Token, rest, err = decodeString(rest); err != nil {
		return Open{}, err
	}
	lists := [2][]string{}
	for i := range lists {
		var err error
		if lists[i], rest, err = decodeList(rest); err != nil {
			return Open{}, err
		}
	}
	if rest != "" {
		return Open{}, fmt.Errorf("relay: %d bytes after the request", len(rest))
	}
	o.Args, o.Env = lists[0], lists[1]
	if len(o.Args) == 0 {
		return Open{}, errors.New("relay: request without arguments")
	}
	for _, kv := range o.Env {
		if !strings.Contains(kv, "=") {
			return Open{}, errors.New("relay: environment entry without '='")
		}
	}
	return o, nil
}

// decodeList reads a count and that many length-prefixed strings, none
// holding a NUL (which no argument or variable can).
func decodeList(p string) ([]string, string, error) {
	n, p, err := decodeLen(p)
	if err != nil {
		return nil, "", err
	}
	if n > len(p)/4 {
		return nil, "", fmt.Errorf("relay: %d entries cannot fit in %d bytes", n, len(p))
	}
	out := make([]string, 0, n)
	for range n {
		var s string
		if s, p, err = decodeString(p); err != nil {
			return nil, "", err
		}
		out = append(out, s)
	}
	return out, p, nil
}

// decodeString reads one length-prefixed string without a NUL.
func decodeString(p string) (string, string, error) {
	l, p, err := decodeLen(p)
	if err != nil {
		return "", "", err
	}
	if l > len(p) {
		return "", "", fmt.Errorf("relay: entry of %d bytes, %d left", l, len(p))
	}
	s := p[:l]
	if strings.IndexByte(s, 0) >= 0 {
		return "", "", errors.New("relay: entry holds a NUL byte")
	}
	return s, p[l:], nil
}

func decodeLen(p string) (int, string, error) {
	if len(p) < 4 {
		return 0, "", errors.New("relay: request truncated")
	}
	return int(binary.BigEndian.Uint32([]byte(p[:4]))), p[4:], nil
}

// AppendFrame appends a frame of type typ with payload p to dst.
func AppendFrame(dst []byte, typ byte, p []byte) []byte {
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p)))
	return append(dst, p...)
}

// ParseHeader reads a frame header: its type and payload length, which must
// not exceed MaxFrame.
func ParseHeader(h []byte) (typ byte, n int, err error) {
	if len(h) < HeaderSize {
		return 0, 0, io.ErrUnexpectedEOF
	}
	n64 := binary.BigEndian.Uint32(h[1:HeaderSize])
	if n64 > MaxFrame {
		return 0, 0, fmt.Errorf("relay: frame of %d bytes, over the limit of %d", n64, MaxFrame)
	}
	return h[0], int(n64), nil
}

// ReadFrame reads one whole frame from r.
func ReadFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	typ, n, err := ParseHeader(h[:])
	if err != nil {
		return 0, nil, err
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("relay: frame cut short: %w", err)
	}
	return typ, payload, nil
}
