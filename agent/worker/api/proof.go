package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// ProofHeader carries the proof that a request comes from the job's
// launcher: "v1 <instance> <counter> <mac>", where mac is the unpadded
// base64url HMAC-SHA256, under the job's request key (jobkey.RequestKey,
// which every holder of the job's id_rsa derives and nobody else can), of
// the version, the launcher instance, the counter, the method, the Host
// and the request URI. worker-agent serves /events to proven requests
// from a budget of their own, so that strangers that hold every slot of
// the shared one do not make the job's own launcher wait (package worker).
//
// The header reveals nothing of the key. What a copy of it is good for is
// bounded: it proves one request to one worker (the Host is signed, and
// the agent takes each instance's counter once; see ProofWindow), to an
// endpoint that answers the same document to anyone anyway.
const ProofHeader = "Podmpi-Job-Proof"

const proofVersion = "v1"

// Prover adds a ProofHeader to requests. Its counter starts at 1 and
// grows with every request. A nil *Prover adds nothing.
type Prover struct {
	key      []byte
	instance string
	n        atomic.Uint64
}

// NewProver proves requests of the launcher instance (launcherid's ID)
// with key; nil when key is empty (no request key: no proof).
func NewProver(key []byte, instance string) *Prover {
	if len(key) == 0 || !proofToken(instance) {
		return nil
	}
	return &Prover{key: key, instance: instance}
}

// Prove sets r's ProofHeader.
func (p *Prover) Prove(r *http.Request) {
	if p == nil {
		return
	}
	n := p.n.Add(1)
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	mac := proofMAC(p.key, p.instance, n, r.Method, host, r.URL.RequestURI())
	r.Header.Set(ProofHeader, proofVersion+" "+p.instance+" "+strconv.FormatUint(n, 10)+" "+
		base64.RawURLEncoding.EncodeToString(mac))
}

// ProvingTransport proves every request it carries with Prover.
type ProvingTransport struct {
	Base   http.RoundTripper // http.DefaultTransport when nil
	Prover *Prover
}

// RoundTrip proves a copy of r (a RoundTripper must not change the
// request it is given) and sends it.
func (t ProvingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.Prover == nil {
		return base.RoundTrip(r)
	}
	c := r.Clone(r.Context())
	t.Prover.Prove(c)
	return base.RoundTrip(c)
}

// CheckProof reports whether r carries a ProofHeader made with key, and
// its instance and counter. The caller still has to take each counter
// once (ProofWindow).
func CheckProof(r *http.Request, key []byte) (instance string, counter uint64, ok bool) {
	h := r.Header.Get(ProofHeader)
	if h == "" || len(key) == 0 || len(h) > 256 {
		return "", 0, false
	}
	f := strings.Split(h, " ")
	if len(f) != 4 || f[0] != proofVersion || !proofToken(f[1]) {
		return "", 0, false
	}
	n, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || n == 0 {
		return "", 0, false
	}
	got, err := base64.RawURLEncoding.DecodeString(f[3])
	if err != nil || !hmac.Equal(got, proofMAC(key, f[1], n, r.Method, r.Host, r.RequestURI)) {
		return "", 0, false
	}
	return f[1], n, true
}

// proofMAC is the MAC of one request.
func proofMAC(key []byte, instance string, n uint64, method, host, uri string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(proofVersion + "\n" + instance + "\n" + strconv.FormatUint(n, 10) + "\n" + method + "\n" + host + "\n" + uri))
	return m.Sum(nil)
}

// proofToken reports whether s can name an instance in the header: 1 to
// 64 bytes of [0-9a-z].
func proofToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// ProofWindow takes each counter of one instance once, as IPsec's
// anti-replay window does: a counter above the highest seen moves the
// window up; one within the 64 below it is taken if it was not yet (a
// launcher's concurrent requests may arrive out of order); anything older
// is refused. The zero value is ready; it is not safe for concurrent use.
type ProofWindow struct {
	highest uint64
	seen    uint64 // bit i: highest-i was taken
}

// Take reports whether n is new, and records it.
func (w *ProofWindow) Take(n uint64) bool {
	switch {
	case n == 0:
		return false
	case n > w.highest:
		if shift := n - w.highest; shift < 64 {
			w.seen = w.seen<<shift | 1
		} else {
			w.seen = 1
		}
		w.highest = n
		return true
	}
	d := w.highest - n
	if d >= 64 || w.seen&(1<<d) != 0 {
		return false
	}
	w.seen |= 1 << d
	return true
}
