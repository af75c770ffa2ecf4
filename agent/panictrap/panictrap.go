// Package panictrap carries a panic from worker goroutines to the goroutine
// that waits for them. A panic in a goroutine cannot be recovered by anyone
// else: it would end the launcher with Go's exit 2 and no termination
// message. Re-raised on the waiting goroutine it reaches cmd/launcher's
// recover instead (exit 71, the panic in the termination message).
package panictrap

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// Trap keeps the first panic of a group of goroutines. The zero value is
// ready to use.
type Trap struct {
	once sync.Once
	v    any
}

// Capture recovers a panic and keeps the first one with the stack of the
// goroutine it happened in; where names that goroutine's kind in the value
// ("a probe goroutine"). It must be deferred directly:
//
//	defer trap.Capture("a probe goroutine")
func (t *Trap) Capture(where string) {
	if r := recover(); r != nil {
		stack := debug.Stack()
		t.once.Do(func() { t.v = fmt.Sprintf("%v [in %s]\n%s", r, where, stack) })
	}
}

// Rethrow panics with the kept value, if any. Call it after every goroutine
// of the group has returned.
func (t *Trap) Rethrow() {
	if t.v != nil {
		panic(t.v)
	}
}
