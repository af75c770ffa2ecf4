package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// serverView is req as a server receives it: the request target in
// origin form, the Host header.
func serverView(req *http.Request) *http.Request {
	r := httptest.NewRequest(req.Method, req.URL.RequestURI(), nil)
	r.Host = req.URL.Host
	r.Header = req.Header.Clone()
	return r
}

func TestProofRoundTrip(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	p := NewProver(key, strings.Repeat("ab", 16))
	req, _ := http.NewRequest(http.MethodGet, "http://tj-node-0-1.tj:9022/events?after=3&since=x", nil)
	p.Prove(req)
	inst, n, ok := CheckProof(serverView(req), key)
	if !ok || inst != strings.Repeat("ab", 16) || n != 1 {
		t.Fatalf("CheckProof = %q %d %v", inst, n, ok)
	}
	p.Prove(req)
	if _, n, _ := CheckProof(serverView(req), key); n != 2 {
		t.Fatalf("second proof has counter %d", n)
	}
	// What the MAC covers: the key, the query, the host, the method.
	if _, _, ok := CheckProof(serverView(req), []byte(strings.Repeat("x", 32))); ok {
		t.Error("accepted under another key")
	}
	for _, change := range []func(*http.Request){
		func(r *http.Request) { r.URL.RawQuery = "after=0" },
		func(r *http.Request) { r.URL.Host = "tj-node-0-2.tj:9022" },
		func(r *http.Request) { r.Method = http.MethodHead },
		func(r *http.Request) {
			r.Header.Set(ProofHeader, strings.Replace(r.Header.Get(ProofHeader), " 2 ", " 3 ", 1))
		},
	} {
		c := req.Clone(req.Context())
		change(c)
		if _, _, ok := CheckProof(serverView(c), key); ok {
			t.Errorf("a changed request kept its proof: %s %s %s", c.Method, c.URL, c.Header.Get(ProofHeader))
		}
	}
	if NewProver(nil, "ab") != nil || NewProver(key, "A B") != nil {
		t.Error("a prover without a key or with an unusable instance")
	}
	var none *Prover
	none.Prove(req) // nil: adds nothing, does not panic
}

func FuzzCheckProof(f *testing.F) {
	key := []byte(strings.Repeat("k", 32))
	req, _ := http.NewRequest(http.MethodGet, "http://w:9022/events", nil)
	NewProver(key, "abc").Prove(req)
	f.Add(req.Header.Get(ProofHeader))
	f.Add("v1 abc 1 ")
	f.Add("v1  0 x")
	f.Fuzz(func(t *testing.T, h string) {
		r := serverView(req)
		r.Header.Set(ProofHeader, h)
		inst, n, ok := CheckProof(r, key)
		if ok && (n == 0 || !proofToken(inst)) {
			t.Fatalf("accepted %q as %q %d", h, inst, n)
		}
	})
}
