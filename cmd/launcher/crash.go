package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher"
)

// internalPanic reports a recovered panic: the value and stack on stderr,
// and the termination message naming it, then returns exitcode.Internal.
// Writing either may itself panic (a broken writer); that is ignored.
func (a *app) internalPanic(r any, stack []byte) exitcode.Code {
	err := fmt.Errorf("internal error: panic: %v (a bug in podmpi: please report it with this message and the launcher's log)", r)
	func() {
		defer func() { _ = recover() }()
		fmt.Fprintf(a.stderr, "launcher: %v\n%s", err, stack)
	}()
	if a.cfg.TerminationLog != "" && !a.rsh {
		func() {
			defer func() { _ = recover() }()
			_ = os.WriteFile(a.cfg.TerminationLog, []byte(launcher.TerminationMessage(exitcode.Internal, err)), 0o644)
		}()
	}
	return exitcode.Internal
}

// crashOutput makes the Go runtime copy a fatal crash (a panic in a
// goroutine that nothing recovers, a fatal runtime error) into the
// termination log too, so that the pod status shows it even though such a
// crash exits 2 and skips every deferred call. The launcher's own goroutine
// and its parallel phases recover their panics into exit 71 (see run); this
// covers what is left. An unwritable path (no /dev/termination-log outside
// Kubernetes) is skipped.
func (a *app) crashOutput() {
	if a.cfg.TerminationLog == "" {
		return
	}
	f, err := os.OpenFile(a.cfg.TerminationLog, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close() // SetCrashOutput keeps its own duplicate
	_ = debug.SetCrashOutput(f, debug.CrashOptions{})
}

// panicForTest, set only by tests at link time (-ldflags -X
// main.panicForTest=main|goroutine), makes the job panic right after the
// flags are checked: in the launcher's goroutine ("main") or in a new one
// ("goroutine"). Release builds leave it empty.
var panicForTest string

func injectTestPanic() {
	switch panicForTest {
	case "main":
		panic("injected by the test build (main.panicForTest=main)")
	case "goroutine":
		go func() { panic("injected by the test build (main.panicForTest=goroutine)") }()
		select {} // the crash ends the process
	}
}
