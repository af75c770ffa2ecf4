package rsh

import (
	"os"
	"runtime"
	"runtime/debug"
)

// ClientGCPercent is the GOGC of a process that runs the client. x/crypto
// allocates a copy of every packet it reads, so a streaming session
// allocates as fast as it moves data; with the client's 2 MB of live heap
// the default (100) collects every 2 MB, about 400 times per GiB, a sixth
// of the client's CPU. 400 collects a fifth as often for a few MB more.
const ClientGCPercent = 400

// TuneProcess sets the Go runtime of a process that runs the client (the
// launcher and worker-agent binaries started as podmpi-rsh, ssh or `rsh`;
// never the launcher serving shared sessions): ClientGCPercent, and one
// processor unless GOMAXPROCS is set. The client moves one session's
// stream: with several processors each packet the connection's reader
// hands to the output copier wakes another thread, and one processor
// costs a fifth less CPU and time per GiB (make bench, throughput, on 2
// CPUs); a blocking write still lets the reader go on, as the runtime
// hands the processor over during system calls.
func TuneProcess() {
	debug.SetGCPercent(ClientGCPercent)
	_, _ = oneProcessor()
}

// TuneServer sets the Go runtime of the launcher once its phases are done
// and it serves shared sessions: one processor unless GOMAXPROCS is set,
// for the reason TuneProcess gives (a session's packets cross threads
// otherwise). The phases before (a handshake with every worker at once)
// used every processor; what remains while mpirun runs is moving sessions'
// streams and light polls. It returns the count before, for the log, and
// restore, which gives the runtime that count back: the launcher calls it
// once mpirun has exited, so that a failure's diagnosis (every worker's
// account asked at once, mpirun's output parsed) is not throttled.
func TuneServer() (before int, changed bool, restore func()) {
	before, changed = oneProcessor()
	return before, changed, func() {
		if changed {
			runtime.GOMAXPROCS(before)
		}
	}
}

// oneProcessor sets GOMAXPROCS to 1 unless the environment sets it, and
// returns the count before and whether it changed.
func oneProcessor() (before int, changed bool) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return runtime.GOMAXPROCS(0), false
	}
	before = runtime.GOMAXPROCS(1)
	return before, before != 1
}
