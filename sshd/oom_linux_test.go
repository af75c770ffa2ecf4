package sshd

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
)

// TestCommandStartsAsOOMVictim: a session's command has its raised
// oom_score_adj the moment it exists, before it can fork anything (read
// here as soon as the fork and exec return, before startAsOOMVictim does
// anything else), and worker-agent's own score is back where it was, also
// after starts side by side. Before, the command's score was written once
// it had started, after a shell may already have forked a rank or a daemon
// with the agent's score.
func TestCommandStartsAsOOMVictim(t *testing.T) {
	own, err := readOOMScoreAdj(selfOOMScoreAdj)
	if err != nil {
		t.Fatal(err)
	}
	want := min(own+sessionOOMBoost, 1000)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			cmd := exec.Command("sleep", "5")
			var atStart int
			boost, err := startAsOOMVictim(func() error {
				if err := cmd.Start(); err != nil {
					return err
				}
				atStart, err = readOOMScoreAdj(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid))
				return err
			})
			if cmd.Process != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			switch {
			case err != nil || boost != nil:
				errs <- fmt.Errorf("start: %v, boost: %v", err, boost)
			case atStart != want:
				errs <- fmt.Errorf("the command's oom_score_adj as it started: %d, want %d (the agent's %d + %d)", atStart, want, own, sessionOOMBoost)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if after, err := readOOMScoreAdj(selfOOMScoreAdj); err != nil || after != own {
		t.Errorf("worker-agent's own oom_score_adj %d (%v) after the starts, want %d", after, err, own)
	}
}
