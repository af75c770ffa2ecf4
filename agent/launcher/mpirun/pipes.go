package mpirun

import (
	"io"
	"os"
	"sync"
	"time"
)

// ioPipes connects non-file stdio of the child through os.Pipe with copier
// goroutines owned by Run, instead of exec.Cmd's, so that Run controls how
// long it waits for output after mpirun exits.
type ioPipes struct {
	childEnds  []*os.File // closed in the parent once the child started
	parentEnds []*os.File // closed when Run is done
	copiers    sync.WaitGroup
}

// out returns the file to give the child for w: w itself when it is an
// *os.File or nil, else the write end of a pipe copied into w.
func (p *ioPipes) out(w io.Writer) (*os.File, error) {
	if w == nil {
		return nil, nil
	}
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.childEnds = append(p.childEnds, wr)
	p.parentEnds = append(p.parentEnds, r)
	p.copiers.Go(func() { _, _ = io.Copy(w, r) })
	return wr, nil
}

// in returns the file to give the child for r. A non-file reader is copied
// into a pipe by a goroutine Run does not wait for: a reader such as a
// terminal may never return.
func (p *ioPipes) in(r io.Reader) (*os.File, error) {
	if r == nil {
		return nil, nil
	}
	if f, ok := r.(*os.File); ok {
		return f, nil
	}
	rd, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.childEnds = append(p.childEnds, rd)
	p.parentEnds = append(p.parentEnds, w)
	go func() {
		_, _ = io.Copy(w, r)
		_ = w.Close()
	}()
	return rd, nil
}

func (p *ioPipes) closeChildEnds() {
	for _, f := range p.childEnds {
		_ = f.Close()
	}
	p.childEnds = nil
}

// wait waits up to d for the output copiers to reach EOF (every holder of
// the pipes has exited); it reports whether they did.
func (p *ioPipes) wait(d time.Duration) bool {
	done := make(chan struct{})
	go func() { p.copiers.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// closeAll closes the parent's ends, which unblocks copiers still reading.
func (p *ioPipes) closeAll() {
	p.closeChildEnds()
	for _, f := range p.parentEnds {
		_ = f.Close()
	}
	p.parentEnds = nil
}

// SameWriter reports whether a and b are the same writer (then stdout and
// stderr share one pipe and one copier, as exec.Cmd does, so a writer that is
// not safe for concurrent use is never written from two goroutines; the
// launcher's output scanner keeps one line buffer for both). A writer that
// is not comparable is never the same.
func SameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil { // not comparable
			same = false
		}
	}()
	return a == b
}
