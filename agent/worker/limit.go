package worker

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// HTTP server bounds: /healthz, /readyz, /info and /metrics are small, so
// every phase of a request gets a short deadline.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 60 * time.Second
	httpMaxHeaderBytes    = 16 << 10
)

// newHTTPServer is the worker's HTTP server on ln, with its timeouts and
// ln's connection tracking.
func newHTTPServer(h http.Handler, ln *limitListener, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ConnState:         ln.connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// limitListener bounds the HTTP connections open at once. Unlike
// netutil.LimitListener it never stops accepting: at the bound it closes
// the oldest idle connection (accepted with no request read yet, or
// waiting between keep-alive requests) to make room, so a flood of idle
// or slowly-talking connections cannot keep the kubelet's /readyz probe
// or a Prometheus scrape out. Only when every connection is busy with a
// request (each bounded by the server's timeouts) is the new one closed.
type limitListener struct {
	net.Listener
	max int
	log *slog.Logger

	mu    sync.Mutex
	conns map[*limitConn]struct{}

	evicted atomic.Uint64
	refused atomic.Uint64
	lastLog atomic.Int64 // unix nanos of the last eviction/refusal log line
}

func newLimitListener(ln net.Listener, max int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: max, log: log, conns: make(map[*limitConn]struct{})}
}

// limitConn is one tracked connection.
type limitConn struct {
	net.Conn
	l         *limitListener
	idleSince time.Time // zero while a request is in progress
	closeOnce sync.Once
}

func (c *limitConn) Close() error {
	c.closeOnce.Do(func() { c.l.remove(c) })
	return c.Conn.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l, idleSince: time.Now()}
		l.mu.Lock()
		var victim *limitConn
		if len(l.conns) >= l.max {
			for o := range l.conns {
				if !o.idleSince.IsZero() && (victim == nil || o.idleSince.Before(victim.idleSince)) {
					victim = o
				}
			}
			if victim == nil {
				l.mu.Unlock()
				c.Close()
				l.refused.Add(1)
				l.note("http connection refused: every connection is busy with a request", c)
				continue
			}
			delete(l.conns, victim)
		}
		l.conns[lc] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close() // the server sees the close and ends the connection
			l.evicted.Add(1)
			l.note("http connection limit reached: closed the oldest idle connection", victim)
		}
		return lc, nil
	}
}

// note logs an eviction or refusal at most once a second.
func (l *limitListener) note(msg string, c net.Conn) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(msg, "remote", c.RemoteAddr().String(), "maxConnections", l.max,
		"evictedTotal", l.evicted.Load(), "refusedTotal", l.refused.Load())
}

// connState is the http.Server's ConnState hook: it tells idle connections
// from busy ones.
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	switch st {
	case http.StateNew, http.StateIdle:
		l.mu.Lock()
		lc.idleSince = time.Now()
		l.mu.Unlock()
	case http.StateActive:
		l.mu.Lock()
		lc.idleSince = time.Time{}
		l.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		lc.closeOnce.Do(func() { l.remove(lc) })
	}
}

func (l *limitListener) remove(c *limitConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// open returns the number of tracked connections.
func (l *limitListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// limitInFlight serves at most n requests of h at once, as promhttp's
// MaxRequestsInFlight does for /metrics: a request past the bound is
// answered 503 at once, with Retry-After, rather than queued.
func limitInFlight(n int, name string, h http.Handler) http.Handler {
	sem := make(chan struct{}, n)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			h.ServeHTTP(rw, r)
		default:
			rw.Header().Set("Retry-After", "1")
			http.Error(rw, fmt.Sprintf("%s: %d requests are being served already; ask again in a second", name, n), http.StatusServiceUnavailable)
		}
	})
}
