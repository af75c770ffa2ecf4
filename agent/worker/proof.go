package worker

import (
	"net/http"
	"sync"
	"time"

	"github.com/podmpi/podmpi/agent/worker/api"
)

// RequestKeyState is what an SSHState that holds the job key also
// reports (*sshd.Server does): the key that proves a request comes from a
// holder of the job's id_rsa (jobkey.RequestKey), nil when there is none.
type RequestKeyState interface {
	RequestKey() []byte
}

// maxProvers bounds the launcher instances whose counters the gate keeps
// (api.ProofWindow); only a request with a valid proof adds one.
const maxProvers = 64

// launcherGate tells requests of the job's launcher (api.ProofHeader made
// with the job's request key, each counter taken once) from everyone
// else's.
type launcherGate struct {
	key func() []byte // nil: no key, nothing is proven

	mu      sync.Mutex
	windows map[string]*proverWindow
}

type proverWindow struct {
	api.ProofWindow
	used time.Time
}

// newLauncherGate proves requests with ssh's request key when it has one.
func newLauncherGate(ssh SSHState) *launcherGate {
	g := &launcherGate{windows: map[string]*proverWindow{}}
	if ks, ok := ssh.(RequestKeyState); ok {
		g.key = ks.RequestKey
	}
	return g
}

// proven reports whether r proves it comes from the job's launcher. A
// request without the header costs nothing; a wrong or replayed proof is
// simply not proven.
func (g *launcherGate) proven(r *http.Request) bool {
	if g.key == nil || r.Header.Get(api.ProofHeader) == "" {
		return false
	}
	instance, n, ok := api.CheckProof(r, g.key())
	if !ok {
		return false
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.windows[instance]
	if w == nil {
		if len(g.windows) >= maxProvers {
			g.forgetOldest()
		}
		w = &proverWindow{}
		g.windows[instance] = w
	}
	w.used = now
	return w.Take(n)
}

// forgetOldest drops the window used least recently. g.mu is held.
func (g *launcherGate) forgetOldest() {
	var oldest string
	for id, w := range g.windows {
		if oldest == "" || w.used.Before(g.windows[oldest].used) {
			oldest = id
		}
	}
	delete(g.windows, oldest)
}
