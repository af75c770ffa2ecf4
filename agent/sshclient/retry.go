package sshclient

import (
	"context"
	"math/rand/v2"
	"time"
)

// Default shape of Retry's backoff.
const (
	DefaultInitialBackoff = 250 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
	DefaultMinAttempt     = time.Second
)

// Retry is the one retry loop of podmpi's SSH clients: the launcher's probe
// (agent/launcher/probe) and podmpi-rsh (agent/rsh) both wait for a worker
// that does not resolve or accept yet with it. Only failures that
// Failure.Transient calls worth retrying are retried (a name not yet in DNS,
// an agent not yet listening, a load-shedding refusal); auth, host-key and
// remote-command failures end the loop at once.
//
// The zero Retry makes one attempt.
type Retry struct {
	// Deadline bounds the whole loop: no attempt starts after it, and an
	// attempt's context ends at it, except that every attempt gets at least
	// MinAttempt. Zero means no deadline.
	Deadline time.Time
	// MaxAttempts bounds the number of attempts; 0 means no bound other than
	// Deadline. With neither set, Do makes one attempt.
	MaxAttempts int
	// Initial and Max shape the delays between attempts: Initial, doubling
	// up to Max, each spread over [0.5x, 1.5x) so that clients started
	// together do not retry in lockstep. Defaults DefaultInitialBackoff and
	// DefaultMaxBackoff. Fixed makes every delay exactly Initial (OpenSSH's
	// ConnectionAttempts: one second apart).
	Initial, Max time.Duration
	Fixed        bool
	// MinAttempt is the least time an attempt gets, even right at the
	// deadline, so that every target is tried once for real;
	// DefaultMinAttempt when zero.
	MinAttempt time.Duration
	// OnAttempt, when set, is called after every attempt with its number
	// (from 1), its failure (nil on success), how long it took, and the delay
	// before the next attempt (0 when none follows).
	OnAttempt func(n int, f *Failure, took, next time.Duration)
}

// Do calls attempt until it succeeds, fails permanently, MaxAttempts is
// reached, the next attempt would start after Deadline, or ctx ends. It
// returns the number of attempts and the last failure (nil on success).
func (r Retry) Do(ctx context.Context, attempt func(ctx context.Context) *Failure) (int, *Failure) {
	backoff := r.Initial
	if backoff <= 0 {
		backoff = DefaultInitialBackoff
	}
	maxBackoff := r.Max
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxBackoff
	}
	minAttempt := r.MinAttempt
	if minAttempt <= 0 {
		minAttempt = DefaultMinAttempt
	}
	for n := 1; ; n++ {
		start := time.Now()
		f := r.bounded(ctx, start, minAttempt, attempt)
		took := time.Since(start)
		if f == nil {
			if r.OnAttempt != nil {
				r.OnAttempt(n, nil, took, 0)
			}
			return n, nil
		}
		wait := backoff
		if !r.Fixed {
			wait = jitter(backoff)
		}
		retry := f.Transient() && ctx.Err() == nil && r.more(n, time.Now().Add(wait))
		next := time.Duration(0)
		if retry {
			next = wait
		}
		if r.OnAttempt != nil {
			r.OnAttempt(n, f, took, next)
		}
		if !retry {
			return n, f
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return n, f
		case <-t.C:
		}
		if !r.Fixed {
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// more reports whether another attempt may follow attempt n and start at
// at.
func (r Retry) more(n int, at time.Time) bool {
	if r.MaxAttempts <= 0 && r.Deadline.IsZero() {
		return false
	}
	if r.MaxAttempts > 0 && n >= r.MaxAttempts {
		return false
	}
	return r.Deadline.IsZero() || at.Before(r.Deadline)
}

// bounded runs one attempt under the deadline: an attempt never outlives it
// (a SYN into a NetworkPolicy drop would otherwise wait out the whole
// connect timeout), except that it always gets minAttempt.
func (r Retry) bounded(ctx context.Context, start time.Time, minAttempt time.Duration, attempt func(context.Context) *Failure) *Failure {
	if r.Deadline.IsZero() {
		return attempt(ctx)
	}
	end := r.Deadline
	if floor := start.Add(minAttempt); end.Before(floor) {
		end = floor
	}
	actx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	return attempt(actx)
}

// jitter spreads d over [0.5d, 1.5d).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
