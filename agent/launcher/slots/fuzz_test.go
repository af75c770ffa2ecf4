package slots

import (
	"reflect"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/worker/api"

	"github.com/podmpi/podmpi/hostfile"
)

// FuzzNP: CommandHasNP and InjectNP never panic, never modify their input,
// change only MPI launcher commands without a count, and after InjectNP an
// MPI launcher command always has one. Arguments are separated by NUL (or
// spaces in the seeds) so any argv can be generated.
func FuzzNP(f *testing.F) {
	for _, tc := range npCases {
		f.Add(strings.ReplaceAll(tc.cmd, " ", "\x00"), 4)
	}
	f.Add("mpirun\x00--mca\x00a", 1)
	f.Add("mpirun\x00-np=", 2)
	f.Add("mpiexec\x00--\x00", 3)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, cmd string, np int) {
		var argv []string
		if cmd != "" {
			argv = strings.Split(cmd, "\x00")
		}
		orig := append([]string(nil), argv...)
		had := CommandHasNP(argv)
		out := InjectNP(argv, np)
		if !reflect.DeepEqual(argv, orig) {
			t.Fatalf("input modified: %q -> %q", orig, argv)
		}
		changed := !reflect.DeepEqual(out, argv) && !(len(out) == 0 && len(argv) == 0)
		if changed != (IsMPIRun(argv) && !had && np >= 1) {
			t.Fatalf("InjectNP(%q, %d) = %q (mpirun %v, had np %v)", argv, np, out, IsMPIRun(argv), had)
		}
		if IsMPIRun(argv) && np >= 1 && !CommandHasNP(out) {
			t.Fatalf("after InjectNP(%q, %d) = %q CommandHasNP is false", argv, np, out)
		}
		if changed && (len(out) != len(argv)+2 || out[1] != "-np") {
			t.Fatalf("bad injection %q", out)
		}
	})
}

// FuzzDecodeInfo: any /info body either decodes to values the launcher can
// use or is an error; never a panic.
func FuzzDecodeInfo(f *testing.F) {
	for _, s := range []string{
		`{"hostname":"tj-node-0-1","slots":{"n":2,"source":"gpu","reason":""},"gpus":{"count":8,"source":"nvml","reason":""}}`,
		`{"slots":{"n":0}}`, `{"slots":{"n":1},"gpus":{"count":-1}}`, `<html>`, `null`, `{"slots":{"n":1e99}}`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		info, err := api.DecodeInfo(strings.NewReader(body))
		if err != nil {
			return
		}
		if info.Slots.N < 1 || info.Slots.N > hostfile.MaxSlots || info.GPUs.Count < 0 {
			t.Fatalf("accepted %+v", info)
		}
	})
}
