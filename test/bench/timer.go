package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Cmd is one command the timer runs and times.
type Cmd struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	// Env is added to the timer's own environment.
	Env []string `json:"env,omitempty"`
	// Discard sends stdout straight to /dev/null (throughput runs).
	Discard bool `json:"discard,omitempty"`
	// Grep keeps the output lines (stdout and stderr) containing any of these
	// strings, per measured run, in [Result.Lines].
	Grep []string `json:"grep,omitempty"`
	// Timeout bounds one run; 0 means 2 minutes.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Spec is what the timer runs: Warmup unmeasured rounds, then Rounds
// measured ones. Every round runs every command once; the starting command
// rotates from round to round, so that no command always runs right after
// the same other one.
type Spec struct {
	Rounds int   `json:"rounds"`
	Warmup int   `json:"warmup"`
	Cmds   []Cmd `json:"cmds"`
}

// Result is the timing of one command.
type Result struct {
	Name    string    `json:"name"`
	Seconds []float64 `json:"seconds"` // wall time of each measured run
	// CPU is the user+system CPU seconds of each measured run: the command
	// and the children it waited for.
	CPU   []float64  `json:"cpu"`
	Lines [][]string `json:"lines,omitempty"`
	// Err describes the first failed run (exit status and output tail); the
	// command is not run again after it.
	Err string `json:"err,omitempty"`
}

// maxKeptLines bounds Lines per run; tailBytes bounds the error tail.
const (
	maxKeptLines = 4096
	tailBytes    = 4096
)

// Run runs spec and returns one Result per command, in spec order. It stops
// early, with ctx's error, when ctx ends.
func Run(ctx context.Context, spec Spec) ([]Result, error) {
	if len(spec.Cmds) == 0 || spec.Rounds < 1 || spec.Warmup < 0 {
		return nil, fmt.Errorf("timer spec: want at least one command and one round (got %d commands, %d rounds, %d warm-up)",
			len(spec.Cmds), spec.Rounds, spec.Warmup)
	}
	for i, c := range spec.Cmds {
		if len(c.Argv) == 0 {
			return nil, fmt.Errorf("timer spec: command %d (%q) has an empty argv", i, c.Name)
		}
	}
	res := make([]Result, len(spec.Cmds))
	for i, c := range spec.Cmds {
		res[i].Name = c.Name
	}
	for round := range spec.Warmup + spec.Rounds {
		measured := round >= spec.Warmup
		for k := range spec.Cmds {
			i := (round + k) % len(spec.Cmds)
			if res[i].Err != "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
			d, cpu, lines, err := runOnce(ctx, spec.Cmds[i])
			if err != nil {
				res[i].Err = err.Error()
				continue
			}
			if measured {
				res[i].Seconds = append(res[i].Seconds, d.Seconds())
				res[i].CPU = append(res[i].CPU, cpu.Seconds())
				if len(spec.Cmds[i].Grep) > 0 {
					res[i].Lines = append(res[i].Lines, lines)
				}
			}
		}
	}
	return res, nil
}

// runOnce runs c once and returns its wall time, from just before fork to
// just after it was reaped, and its CPU time.
func runOnce(ctx context.Context, c Cmd) (time.Duration, time.Duration, []string, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	out := &lineKeeper{grep: c.Grep}
	cmd.Stderr = out
	if c.Discard {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		defer null.Close()
		cmd.Stdout = null
	} else {
		cmd.Stdout = out
	}
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	out.flush()
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %v", timeout)
		}
		return d, 0, nil, fmt.Errorf("%s: %w; output tail:\n%s", strings.Join(c.Argv, " "), err, out.tail.String())
	}
	return d, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), out.kept, nil
}

// lineKeeper is the output sink of a run: it keeps the lines matching grep
// and the last tailBytes bytes. Both writers of a command share one
// lineKeeper; os/exec serializes them through one goroutine only when they
// are the same value, which they are.
type lineKeeper struct {
	grep    []string
	partial []byte
	kept    []string
	tail    bytes.Buffer
}

func (k *lineKeeper) Write(p []byte) (int, error) {
	k.tail.Write(p)
	if k.tail.Len() > 2*tailBytes {
		b := k.tail.Bytes()[k.tail.Len()-tailBytes:]
		k.tail = *bytes.NewBuffer(append([]byte(nil), b...))
	}
	if len(k.grep) == 0 {
		return len(p), nil
	}
	k.partial = append(k.partial, p...)
	for {
		i := bytes.IndexByte(k.partial, '\n')
		if i < 0 {
			break
		}
		k.line(string(k.partial[:i]))
		k.partial = k.partial[i+1:]
	}
	if len(k.partial) > 1<<20 { // a megabyte without newline: not a log line
		k.partial = k.partial[:0]
	}
	return len(p), nil
}

func (k *lineKeeper) line(l string) {
	if len(k.kept) >= maxKeptLines {
		return
	}
	for _, g := range k.grep {
		if strings.Contains(l, g) {
			k.kept = append(k.kept, l)
			return
		}
	}
}

func (k *lineKeeper) flush() {
	if len(k.partial) > 0 {
		k.line(string(k.partial))
		k.partial = nil
	}
}
