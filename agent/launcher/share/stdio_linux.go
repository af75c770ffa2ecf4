package share

import (
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/rsh/relay"
)

// stdio are a relay's streams as the launcher holds them.
type stdio struct {
	pipes  *pipes
	mu     sync.Mutex
	held   []held
	in     stream
	out    io.Writer
	err    io.Writer
	closed bool
}

// stream is one of a relay's streams: an *os.File, or a nowait for a
// socket or a pipe that could not be reopened.
type stream interface {
	io.Reader
	io.Writer
	Close() error
	SetWriteDeadline(time.Time) error
}

// adopt takes the relay's descriptors (see pipes.take).
func (st *stdio) adopt(modes [3]relay.Stream, fds []int) {
	next := func(write bool, name string) stream {
		h := st.pipes.take(fds[0], write, name)
		fds = fds[1:]
		st.held = append(st.held, h)
		return h.f
	}
	st.out, st.err = io.Discard, io.Discard
	if modes[0] == relay.StreamFD {
		st.in = next(false, "podmpi-rsh stdin")
	}
	if modes[1] == relay.StreamFD {
		st.out = next(true, "podmpi-rsh stdout")
	}
	switch modes[2] {
	case relay.StreamFD:
		st.err = next(true, "podmpi-rsh stderr")
	case relay.StreamStdout:
		st.err = st.out
	}
}

// streams are the client's stdin (nil: nothing to read), stdout and stderr.
func (st *stdio) streams() (io.Reader, io.Writer, io.Writer) {
	if st.in == nil {
		return nil, st.out, st.err
	}
	return st.in, st.out, st.err
}

// interrupt is for a session cut short: a stdin of its own is closed (its
// reader returns), and writes to outputs of its own get rsh.AbortWait to
// finish, so that a copier blocked on a pipe or socket nobody drains
// returns. A pipe shared with other sessions is left alone (its deadline
// would be theirs too): its copier returns when the reader drains it or
// goes away.
func (st *stdio) interrupt() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	for _, h := range st.held {
		switch {
		case h.shared != nil:
		case h.f == st.in:
			_ = h.f.Close()
		default:
			_ = h.f.SetWriteDeadline(time.Now().Add(rsh.AbortWait))
		}
	}
}

// close lets go of the streams once; a copier blocked on one of its own
// returns (on a regular file or a device nothing blocks).
func (st *stdio) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	st.closed = true
	for _, h := range st.held {
		st.pipes.release(h)
	}
}

// pipes are the relays' pipes as the launcher holds them, each reopened as
// a non-blocking description of the launcher's own. An output pipe is
// shared by every session that writes to it: Open MPI's ssh children all
// inherit mpirun's stdout and stderr, and the launcher then holds two
// descriptors for all of its sessions rather than two for each. An input
// pipe is never shared: a session's reader of it must end with the session
// without taking what another session's command would read.
type pipes struct {
	mu sync.Mutex
	m  map[pipeKey]*sharedPipe
}

type pipeKey struct {
	dev, ino uint64
	write    bool
}

type sharedPipe struct {
	key  pipeKey
	f    *os.File
	refs int
}

// held is one stream: a shared pipe, or a descriptor of its own (shared
// nil).
type held struct {
	f      stream
	shared *sharedPipe
}

// take adopts the relay's descriptor fd (and closes it). A pipe is
// reopened non-blocking through /proc (so that closing it ends a blocked
// read or write at once, and the relay's parent, which may share the
// relay's description, never sees its flags change), an output pipe once
// for every session on it. A socket cannot be reopened, and neither can a
// pipe without /proc: each becomes a nowait, which gets the same from
// per-call non-blocking I/O. Anything else (a regular file, a device) never
// blocks and is used as it is.
func (p *pipes) take(fd int, write bool, name string) held {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return held{f: os.NewFile(uintptr(fd), name)}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return held{f: newNowait(fd, true, name)}
	case unix.S_IFIFO:
	default:
		return held{f: os.NewFile(uintptr(fd), name)}
	}
	key := pipeKey{dev: st.Dev, ino: st.Ino, write: write}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.m[key]; sp != nil && write {
		_ = unix.Close(fd)
		sp.refs++
		return held{f: sp.f, shared: sp}
	}
	mode := unix.O_RDONLY
	if write {
		mode = unix.O_WRONLY
	}
	nfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), mode|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return held{f: newNowait(fd, false, name)}
	}
	_ = unix.Close(fd)
	f := os.NewFile(uintptr(nfd), name)
	if !write {
		return held{f: f}
	}
	if p.m == nil {
		p.m = map[pipeKey]*sharedPipe{}
	}
	sp := &sharedPipe{key: key, f: f, refs: 1}
	p.m[key] = sp
	return held{f: f, shared: sp}
}

// release lets go of h: a shared pipe is closed with its last session.
func (p *pipes) release(h held) {
	if h.shared == nil {
		_ = h.f.Close()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h.shared.refs--
	if h.shared.refs == 0 {
		delete(p.m, h.shared.key)
		_ = h.f.Close()
	}
}
