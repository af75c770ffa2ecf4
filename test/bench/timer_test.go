package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	spec := Spec{Rounds: 3, Warmup: 1, Cmds: []Cmd{
		{Name: "true", Argv: []string{"/bin/true"}},
		{Name: "sleep", Argv: []string{"/bin/sleep", "0.05"}},
		{Name: "grep", Argv: []string{"/bin/sh", "-c", `echo "keep me $X"; echo drop; echo "keep too" >&2`}, Env: []string{"X=1"}, Grep: []string{"keep"}},
		{Name: "fails", Argv: []string{"/bin/sh", "-c", "echo boom >&2; exit 3"}},
		{Name: "discard", Argv: []string{"/usr/bin/head", "-c", "1000000", "/dev/zero"}, Discard: true},
	}}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 {
		t.Fatalf("%d results, want 5", len(res))
	}
	for _, i := range []int{0, 1, 2, 4} {
		if res[i].Err != "" || len(res[i].Seconds) != 3 {
			t.Errorf("%s: err %q, %d samples, want none and 3", res[i].Name, res[i].Err, len(res[i].Seconds))
		}
	}
	if len(res[4].CPU) != 3 || res[4].CPU[0] <= 0 {
		t.Errorf("head -c 1MB CPU samples %v, want 3 positive", res[4].CPU)
	}
	for _, s := range res[1].Seconds {
		if s < 0.05 || s > 5 {
			t.Errorf("sleep 0.05 measured %v s", s)
		}
	}
	if got := res[2].Lines; len(got) != 3 || len(got[0]) != 2 || got[0][0] != "keep me 1" {
		t.Errorf("grep lines = %q, want 3 runs of [keep me 1, keep too]", got)
	}
	if !strings.Contains(res[3].Err, "exit status 3") || !strings.Contains(res[3].Err, "boom") || len(res[3].Seconds) != 0 {
		t.Errorf("failing command: err %q samples %v", res[3].Err, res[3].Seconds)
	}
}

func TestRunTimeout(t *testing.T) {
	start := time.Now()
	res, err := Run(context.Background(), Spec{Rounds: 1, Cmds: []Cmd{{Name: "hang", Argv: []string{"/bin/sleep", "30"}, Timeout: 200 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res[0].Err, "timed out") || time.Since(start) > 10*time.Second {
		t.Errorf("err %q after %v, want a timeout within seconds", res[0].Err, time.Since(start))
	}
}

func TestRunBadSpec(t *testing.T) {
	for _, s := range []Spec{{}, {Rounds: 1}, {Rounds: 1, Cmds: []Cmd{{Name: "x"}}}} {
		if _, err := Run(context.Background(), s); err == nil {
			t.Errorf("Run(%+v) = nil error", s)
		}
	}
}
