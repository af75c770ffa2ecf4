package trainerstatus

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client sends status requests to Trainer's endpoint with the job's token,
// read from its file at every request (the kubelet rotates it), over TLS
// verified with the endpoint's CA (read again when the file changes).
type Client struct {
	ep Endpoint

	mu      sync.Mutex
	caPEM   []byte
	hc      *http.Client
	timeout time.Duration
}

// NewClient returns a client of ep.
func NewClient(ep Endpoint) *Client {
	return &Client{ep: ep, timeout: requestTimeout}
}

// Answer is what Trainer's endpoint answered.
type Answer struct {
	Code int
	Body []byte // at most 4 KiB of it
	// RetryAfter is the answer's Retry-After (0 without one): the least
	// wait before the next request.
	RetryAfter time.Duration
}

// maxRetryAfter bounds the wait a Retry-After can ask for: a bogus one
// must not silence the reports for the rest of the job.
const maxRetryAfter = 10 * time.Minute

// retryAfter reads a Retry-After header, in seconds or an HTTP date
// (RFC 9110), as a wait from now: 0 when it is absent, unreadable or past,
// at most maxRetryAfter.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	var d time.Duration
	if strings.Trim(h, "0123456789") == "" { // delay-seconds, which may overflow
		d = maxRetryAfter
		if n, err := strconv.ParseUint(h, 10, 64); err == nil && n < uint64(maxRetryAfter/time.Second) {
			d = time.Duration(n) * time.Second
		}
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, maxRetryAfter))
}

// Post sends one status request. An error is a request that got no answer
// (no token, no CA, the network); an answer other than 200 is not an
// error: the caller reports it.
func (c *Client) Post(ctx context.Context, st *Status) (Answer, error) {
	body, err := json.Marshal(Request{TrainerStatus: st})
	if err != nil {
		return Answer{}, err
	}
	if len(body) > MaxBody {
		return Answer{}, fmt.Errorf("a status of %d bytes, over the %d the endpoint takes", len(body), MaxBody)
	}
	token, err := readToken(c.ep.TokenFile)
	if err != nil {
		return Answer{}, err
	}
	hc, err := c.httpClient()
	if err != nil {
		return Answer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.ep.URL.String(), bytes.NewReader(body))
	if err != nil {
		return Answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("POST %s: %w", c.ep.URL.Redacted(), unwrapURL(err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody))
	return Answer{Code: resp.StatusCode, Body: b, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}, nil
}

// readToken reads the bearer token from its file. The token is never
// logged or put into an error.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token %s: %w", path, pathErr(err))
	}
	t := strings.TrimSpace(string(b))
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("the token file %s: %w (empty or not one token)", path, errNoToken)
	}
	return t, nil
}

// pathErr drops the path from an *os.PathError (the message names it).
func pathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// httpClient is the client for the CA the endpoint's file holds now.
func (c *Client) httpClient() (*http.Client, error) {
	var pem []byte
	if c.ep.CAFile != "" {
		b, err := os.ReadFile(c.ep.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA %s: %w", c.ep.CAFile, pathErr(err))
		}
		pem = b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hc != nil && bytes.Equal(pem, c.caPEM) {
		return c.hc, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the endpoint is in the cluster: a proxy variable must not divert the token
	tr.MaxIdleConns, tr.IdleConnTimeout = 1, 2*MinInterval
	if pem != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA %s holds no PEM certificate", c.ep.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if c.hc != nil {
		c.hc.CloseIdleConnections()
	}
	c.hc, c.caPEM = &http.Client{Transport: tr, CheckRedirect: noRedirect}, pem
	return c.hc, nil
}

// noRedirect keeps the token from following a redirect elsewhere.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// unwrapURL drops *url.Error's method and URL (the message says them).
func unwrapURL(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && strings.HasPrefix(err.Error(), "Post ") {
		return u.Unwrap()
	}
	return err
}
