package awaited

import (
	"sync"
	"time"
)

// Tracker follows a wait that asks many hosts in parallel, each until it
// gives the answer awaited or the wait's deadline passes: the slots phase's
// /info requests and the SSH probe. It keeps what each host not settled yet
// last answered, and writes one progress line as soon as a host must be
// waited for (its first answer was not the one awaited) and every host has
// answered once (or a period has passed: a host whose first attempt hangs
// is shown as not answered yet), then one every period: the wait is seen,
// with what it sees, when it starts, however long it lasts. Its methods
// are safe for concurrent use.
type Tracker struct {
	names []string
	note  func(host string) string

	mu       sync.Mutex
	answers  []Answer
	settled  []bool
	nSettled int
	heard    []bool // the host answered once, or is settled
	nHeard   int

	waits     chan struct{} // closed by the first Waits
	waitsOnce sync.Once
	allHeard  chan struct{} // closed when every host is heard
}

// NewTracker tracks the hosts names (a wait's hosts, by index). note, if
// set, says what else is known of a host ("" for nothing; see Host.Note);
// it must not block.
func NewTracker(names []string, note func(host string) string) *Tracker {
	t := &Tracker{
		names: names, note: note,
		answers: make([]Answer, len(names)), settled: make([]bool, len(names)), heard: make([]bool, len(names)),
		waits: make(chan struct{}), allHeard: make(chan struct{}),
	}
	if len(names) == 0 {
		close(t.allHeard)
	}
	return t
}

// Saw records what host i's last attempt got.
func (t *Tracker) Saw(i int, a Answer) {
	t.mu.Lock()
	t.answers[i] = a
	t.hear(i)
	t.mu.Unlock()
}

// Settled says host i is waited for no more: it answered, or gave up.
func (t *Tracker) Settled(i int) {
	t.mu.Lock()
	if !t.settled[i] {
		t.settled[i] = true
		t.nSettled++
	}
	t.hear(i)
	t.mu.Unlock()
}

// hear marks host i heard of; t.mu is held.
func (t *Tracker) hear(i int) {
	if t.heard[i] {
		return
	}
	t.heard[i] = true
	t.nHeard++
	if t.nHeard == len(t.names) {
		close(t.allHeard)
	}
}

// Waits says a host must be waited for: the first progress line is written
// now (later calls do nothing).
func (t *Tracker) Waits() {
	t.waitsOnce.Do(func() { close(t.waits) })
}

// Waiting returns how many hosts are settled, of how many, and Line of the
// others (each listed while there are at most maxNames).
func (t *Tracker) Waiting(maxNames int) (settled, total int, line string) {
	t.mu.Lock()
	var hosts []Host
	for i, n := range t.names {
		if !t.settled[i] {
			hosts = append(hosts, Host{Name: n, Answer: t.answers[i]})
		}
	}
	settled = t.nSettled
	t.mu.Unlock()
	if t.note != nil {
		for i := range hosts {
			hosts[i].Note = t.note(hosts[i].Name)
		}
	}
	return settled, len(t.names), Line(hosts, maxNames)
}

// Report writes the progress lines with report, given Waiting(maxNames):
// the first once Waits was called and every host answered once (at most a
// period after Waits), then every period, until the returned stop is
// called; stop returns once no line is being written.
func (t *Tracker) Report(period time.Duration, maxNames int, report func(settled, total int, waiting string)) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-quit:
			return
		case <-t.waits:
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		select {
		case <-quit:
			return
		case <-t.allHeard:
		case <-tick.C:
		}
		for {
			if settled, total, line := t.Waiting(maxNames); settled < total {
				report(settled, total, line)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}
