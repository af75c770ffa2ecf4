package sshd

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RefusalMarker is the phrase every refusal line of an over-limit
// connection carries; clients (agent/sshclient) recognise it.
const RefusalMarker = "too many unauthenticated connections"

// startupLimiter bounds unauthenticated connections like OpenSSH's
// MaxStartups "begin:rate:full" and PerSourceMaxStartups: at most perSource
// from one IP address; from begin on (all sources together) a new
// connection is refused with a probability rising linearly from rate% to
// 100% at full, so a flood cannot keep every slot while well-behaved
// clients still get most of theirs. Authenticated connections hold no
// slot.
type startupLimiter struct {
	begin, rate, full int
	perSource         int
	intn              func(n int) int // random in [0,n); rand.IntN unless a test sets it

	mu     sync.Mutex
	total  int
	bySrc  map[string]int
	refuse chan struct{} // bounds goroutines writing refusal lines
}

// maxRefusers bounds the refused connections lingering at once (see
// refuseConn).
const maxRefusers = 32

func newStartupLimiter(cfg Config) *startupLimiter {
	return &startupLimiter{
		begin: cfg.MaxStartupsBegin, rate: cfg.MaxStartupsRate, full: cfg.MaxStartups,
		perSource: cfg.PerSourceMaxStartups,
		intn:      rand.IntN,
		bySrc:     make(map[string]int),
		refuse:    make(chan struct{}, maxRefusers),
	}
}

// String is the MaxStartups setting as OpenSSH writes it: begin:rate:full.
func (l *startupLimiter) String() string {
	return FormatMaxStartups(l.begin, l.rate, l.full)
}

// acquire takes a slot for a connection from src. It returns a release
// func, or the refusal reason (a result of podmpi_worker_ssh_connections_total)
// and the line to send.
func (l *startupLimiter) acquire(src string) (release func(), reason, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.bySrc[src]; n >= l.perSource {
		return nil, connRejectedPerSource, fmt.Sprintf("worker-agent: %s from %s (per-source limit %d, --ssh.per-source-max-startups); try again later\r\n",
			RefusalMarker, src, l.perSource)
	}
	if l.drop(l.total) {
		return nil, connRejectedMaxStartups, fmt.Sprintf("worker-agent: %s (%d open, --ssh.max-startups %s); try again later\r\n",
			RefusalMarker, l.total, l.String())
	}
	l.total++
	l.bySrc[src]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.bySrc[src]--; l.bySrc[src] <= 0 {
				delete(l.bySrc, src)
			}
		})
	}, "", ""
}

// drop is OpenSSH's should_drop_connection: never below begin, always at
// full, and in between with probability rate% + (100-rate)% *
// (n-begin)/(full-begin).
func (l *startupLimiter) drop(n int) bool {
	switch {
	case n < l.begin:
		return false
	case n >= l.full || l.rate >= 100:
		return true
	}
	p := 100 - l.rate
	p *= n - l.begin
	p /= l.full - l.begin
	p += l.rate
	return l.intn(100) < p
}

// held returns the unauthenticated connections counted now (tests).
func (l *startupLimiter) held() (total int, bySrc map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]int, len(l.bySrc))
	for k, v := range l.bySrc {
		m[k] = v
	}
	return l.total, m
}

// sourceOf is the limiter's key for a connection: the remote IP address.
func sourceOf(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	h, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return h
}

// refuseConn tells an over-limit peer why it is dropped, instead of
// closing in silence: RFC 4253 §4.2 lets a server send lines before its
// identification string, and clients print or keep them. The line goes out
// at once (a few dozen bytes into a fresh socket's empty send buffer never
// block), then the write side is shut. Closing a socket with unread input
// makes the kernel send a reset, which can discard the line at the peer, so
// the peer's own identification line is drained first: by a lingering
// goroutine (at most maxRefusers at once, each for refusalLinger at most),
// or, when they are all busy, by reading just what has already arrived.
func (s *Server) refuseConn(c net.Conn, line string) {
	_ = c.SetWriteDeadline(time.Now().Add(refusalLinger))
	if _, err := io.WriteString(c, line); err != nil {
		c.Close()
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	select {
	case s.limits.refuse <- struct{}{}:
		if s.trackConnGoroutine() {
			go func() {
				defer s.connWG.Done()
				defer func() { <-s.limits.refuse }()
				_ = c.SetReadDeadline(time.Now().Add(refusalLinger))
				_, _ = io.CopyN(io.Discard, c, 4<<10)
				c.Close()
			}()
			return
		}
		<-s.limits.refuse
	default:
	}
	_ = c.SetReadDeadline(time.Now())
	_, _ = io.CopyN(io.Discard, c, 4<<10)
	c.Close()
}

// refusalLinger bounds how long a refused connection is kept to drain.
const refusalLinger = 500 * time.Millisecond

// ParseMaxStartups parses OpenSSH's MaxStartups syntax: "full" (every
// connection past full is refused) or "begin:rate:full" (random early drop
// from begin on, rate percent at begin rising to 100 at full). It requires
// 1 <= begin <= full and 1 <= rate <= 100.
func ParseMaxStartups(v string) (begin, rate, full int, err error) {
	parts := strings.Split(strings.TrimSpace(v), ":")
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return 0, 0, 0, fmt.Errorf("%q: want N or BEGIN:RATE:FULL of positive integers, e.g. %s", v, FormatMaxStartups(DefaultMaxStartupsBegin, DefaultMaxStartupsRate, DefaultMaxStartups))
		}
		nums[i] = n
	}
	switch len(nums) {
	case 1:
		return nums[0], 100, nums[0], nil
	case 3:
		begin, rate, full = nums[0], nums[1], nums[2]
	default:
		return 0, 0, 0, fmt.Errorf("%q: want N or BEGIN:RATE:FULL, e.g. %s", v, FormatMaxStartups(DefaultMaxStartupsBegin, DefaultMaxStartupsRate, DefaultMaxStartups))
	}
	if begin > full {
		return 0, 0, 0, fmt.Errorf("%q: BEGIN %d is above FULL %d", v, begin, full)
	}
	if rate > 100 {
		return 0, 0, 0, errors.New(strconv.Quote(v) + ": RATE is a percentage, 1 to 100")
	}
	return begin, rate, full, nil
}

// FormatMaxStartups writes a MaxStartups setting as ParseMaxStartups reads
// it.
func FormatMaxStartups(begin, rate, full int) string {
	if begin >= full {
		return strconv.Itoa(full)
	}
	return strconv.Itoa(begin) + ":" + strconv.Itoa(rate) + ":" + strconv.Itoa(full)
}
