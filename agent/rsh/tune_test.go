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
	if before, changed := TuneServer(); changed || before != 3 || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("GOMAXPROCS set by the user: TuneServer = %d, %v; now %d, want 3 untouched", before, changed, runtime.GOMAXPROCS(0))
	}
	os.Unsetenv("GOMAXPROCS") // t.Setenv restores it
	if before, changed := TuneServer(); !changed || before != 3 || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("TuneServer = %d, %v; now %d, want 3, true and one processor", before, changed, runtime.GOMAXPROCS(0))
	}
	if _, changed := TuneServer(); changed {
		t.Fatal("a second TuneServer changed something")
	}
}
