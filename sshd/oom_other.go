//go:build !linux

package sshd

// preferAsOOMVictim does nothing where there is no oom_score_adj.
func preferAsOOMVictim(int) error { return nil }
