package rsh

import (
	"os"
	"runtime"
	"testing"
)

func TestTuneServer(t *testing.T) {
	was := runtime.GOMAXPROCS(3)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })

	t.Setenv("GOMAXPROCS", "3")
	before, changed, restore := TuneServer()
	if changed || before != 3 || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("GOMAXPROCS set by the user: TuneServer = %d, %v; now %d, want 3 untouched", before, changed, runtime.GOMAXPROCS(0))
	}
	restore()
	if n := runtime.GOMAXPROCS(0); n != 3 {
		t.Fatalf("restoring what was not changed: GOMAXPROCS %d, want 3", n)
	}
	os.Unsetenv("GOMAXPROCS") // t.Setenv restores it
	before, changed, restore = TuneServer()
	if !changed || before != 3 || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("TuneServer = %d, %v; now %d, want 3, true and one processor", before, changed, runtime.GOMAXPROCS(0))
	}
	if _, changed, _ := TuneServer(); changed {
		t.Fatal("a second TuneServer changed something")
	}
	// The diagnosis after mpirun gets every processor back.
	restore()
	if n := runtime.GOMAXPROCS(0); n != 3 {
		t.Fatalf("after restore: GOMAXPROCS %d, want the 3 it had", n)
	}
}
