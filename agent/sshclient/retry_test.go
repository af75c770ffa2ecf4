package sshclient

import (
	"context"
	"errors"
	"testing"
	"time"
)

func refused() *Failure {
	return &Failure{Host: "w", Port: 2222, Phase: PhaseTCPRefused, Cause: errors.New("connection refused")}
}

func TestRetryZeroValueMakesOneAttempt(t *testing.T) {
	n, f := Retry{}.Do(context.Background(), func(context.Context) *Failure { return refused() })
	if n != 1 || f == nil || f.Phase != PhaseTCPRefused {
		t.Fatalf("n=%d f=%v, want one tcp-refused attempt", n, f)
	}
}

func TestRetryStopsAtMaxAttempts(t *testing.T) {
	var seen []time.Duration
	r := Retry{MaxAttempts: 3, Initial: time.Millisecond, Fixed: true,
		OnAttempt: func(n int, f *Failure, _, next time.Duration) { seen = append(seen, next) }}
	n, f := r.Do(context.Background(), func(context.Context) *Failure { return refused() })
	if n != 3 || f == nil {
		t.Fatalf("n=%d f=%v, want 3 failed attempts", n, f)
	}
	// Fixed: every delay is exactly Initial; none after the last attempt.
	if len(seen) != 3 || seen[0] != time.Millisecond || seen[1] != time.Millisecond || seen[2] != 0 {
		t.Fatalf("delays %v, want [1ms 1ms 0]", seen)
	}
}

func TestRetrySucceedsAfterTransientFailures(t *testing.T) {
	calls := 0
	r := Retry{Deadline: time.Now().Add(time.Minute), Initial: time.Millisecond, Max: 2 * time.Millisecond}
	n, f := r.Do(context.Background(), func(ctx context.Context) *Failure {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("attempt context has no deadline")
		}
		if calls < 4 {
			return refused()
		}
		return nil
	})
	if n != 4 || f != nil {
		t.Fatalf("n=%d f=%v, want success at attempt 4", n, f)
	}
}

func TestRetryDoesNotRetryPermanentFailures(t *testing.T) {
	for _, ph := range []Phase{PhaseAuth, PhaseHostKey, PhaseRemoteCommand, PhaseConfig} {
		n, f := Retry{Deadline: time.Now().Add(time.Minute), MaxAttempts: 10, Initial: time.Millisecond}.Do(context.Background(),
			func(context.Context) *Failure { return &Failure{Phase: ph, Cause: errors.New("x")} })
		if n != 1 || f == nil || f.Phase != ph {
			t.Errorf("%s: n=%d f=%v, want one attempt", ph, n, f)
		}
	}
}

func TestRetryDeadline(t *testing.T) {
	// An attempt's context ends at the deadline.
	dl := time.Now().Add(time.Minute)
	_, _ = Retry{Deadline: dl}.Do(context.Background(), func(ctx context.Context) *Failure {
		if got, ok := ctx.Deadline(); !ok || !got.Equal(dl) {
			t.Errorf("attempt deadline %v (%t), want %v", got, ok, dl)
		}
		return nil
	})
	// A deadline already passed still gets one real attempt of MinAttempt,
	// and no second one.
	past := time.Now().Add(-time.Second)
	n, f := Retry{Deadline: past, MinAttempt: time.Hour}.Do(context.Background(), func(ctx context.Context) *Failure {
		if got, ok := ctx.Deadline(); !ok || !got.After(time.Now().Add(30*time.Minute)) {
			t.Errorf("attempt deadline %v (%t), want MinAttempt from its start", got, ok)
		}
		return refused()
	})
	if n != 1 || f == nil {
		t.Fatalf("n=%d f=%v, want one failed attempt", n, f)
	}
}

func TestRetryStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	n, f := Retry{MaxAttempts: 1000, Initial: time.Millisecond, Fixed: true}.Do(ctx, func(context.Context) *Failure {
		calls++
		if calls == 2 {
			cancel()
		}
		return refused()
	})
	if n != 2 || f == nil {
		t.Fatalf("n=%d f=%v, want 2 attempts, then stop", n, f)
	}
}

func TestRetryJitterRange(t *testing.T) {
	for range 200 {
		if d := jitter(100 * time.Millisecond); d < 50*time.Millisecond || d >= 150*time.Millisecond {
			t.Fatalf("jitter(100ms) = %v, want [50ms, 150ms)", d)
		}
	}
}
