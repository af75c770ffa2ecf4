package stream

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// chunks reads back the sizes of the reads asked of it, answering each
// with as much as asked (a stream) or with one byte (a trickle).
type chunks struct {
	left    int
	trickle bool
	asked   []int
}

func (c *chunks) Read(p []byte) (int, error) {
	c.asked = append(c.asked, len(p))
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.left)
	if c.trickle {
		n = 1
	}
	for i := range p[:n] {
		p[i] = 'x'
	}
	c.left -= n
	return n, nil
}

func TestCopyGrowsForAStream(t *testing.T) {
	src := &chunks{left: 100}
	var dst bytes.Buffer
	if err := Copy(&dst, src, 8, 32); err != nil || dst.Len() != 100 {
		t.Fatalf("copied %d, %v", dst.Len(), err)
	}
	if src.asked[0] != 8 || src.asked[1] != 32 {
		t.Fatalf("read sizes %v, want 8 then 32", src.asked)
	}
}

func TestCopyStaysSmallForATrickle(t *testing.T) {
	src := &chunks{left: 5, trickle: true}
	var dst bytes.Buffer
	if err := Copy(&dst, src, 8, 32); err != nil || dst.String() != "xxxxx" {
		t.Fatalf("copied %q, %v", dst.String(), err)
	}
	for _, n := range src.asked {
		if n != 8 {
			t.Fatalf("read sizes %v, want 8 throughout", src.asked)
		}
	}
}

type failWriter struct{}

var errWrite = errors.New("write failed")

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }

func TestCopyReturnsTheWriteError(t *testing.T) {
	if err := Copy(failWriter{}, &chunks{left: 10}, 8, 32); !errors.Is(err, errWrite) {
		t.Fatalf("got %v", err)
	}
}
