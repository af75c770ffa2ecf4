package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher"
)

// parse runs the command line in process with every command replaced by
// one that records the Config it gets.
func parse(t *testing.T, env map[string]string, args ...string) (launcher.Config, string, exitcode.Code, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var got launcher.Config
	var which string
	capture := func(name string) runFunc {
		return func(_ context.Context, cfg launcher.Config) (exitcode.Code, error) {
			got, which = cfg, name
			return exitcode.OK, nil
		}
	}
	var out bytes.Buffer
	a := &app{cfg: launcher.Defaults(), stdout: &out, stderr: &out}
	root := newRootCmd(a, commands{job: capture("job"), probe: capture("probe"), hostfile: capture("hostfile"), discoverHosts: capture("discover-hosts")})
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	code := exitcode.OK
	if err := root.ExecuteContext(context.Background()); err != nil {
		code = exitcode.Internal
		if _, ok := err.(*launcher.UsageError); ok {
			code = exitcode.Usage
		}
		out.WriteString(err.Error())
	}
	return got, which, code, out.String()
}

// TestFlagsToConfig: every flag and its PODMPI_* twin land in the one
// Config the launcher runs with; what is not given keeps Defaults().
func TestFlagsToConfig(t *testing.T) {
	cfg, which, code, out := parse(t, map[string]string{"PODMPI_PROBE_PARALLEL": "8", "PODMPI_SSH_USER": "mpiuser"},
		"--workers", "a=2,b", "--slots", "4", "--discovery.timeout", "30s", "--mpi.implementation", "mpich",
		"--ssh.port", "2022", "--probe.parallel", "16", "--probe.ssh-sample", "0", "--web.listen-address", "",
		"--", "mpirun", "-np", "8", "./app")
	if code != exitcode.OK || which != "job" {
		t.Fatalf("code %d, ran %q: %s", code, which, out)
	}
	want := launcher.Defaults()
	want.Discovery.Workers = []string{"a=2", "b"}
	want.Slots = 4
	want.DiscoveryTimeout = 30 * time.Second
	want.Implementation = "mpich"
	want.SSHPort = 2022
	want.ProbeParallel = 16 // the flag wins over its twin
	want.ProbeSSHSample = 0
	want.SSHUser = "mpiuser" // from the twin
	want.WebAddr = ""
	want.Command = []string{"mpirun", "-np", "8", "./app"}
	// What the process wires in is not a setting.
	cfg.Logger, cfg.Stdin, cfg.Stdout, cfg.Stderr, cfg.Report = nil, nil, nil, nil, nil
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Config =\n%+v\nwant\n%+v", cfg, want)
	}

	// --slots is parsed once, when the flag is set: auto is 0.
	for in, n := range map[string]int{"auto": 0, "AUTO": 0, " 3 ": 3} {
		cfg, _, code, out := parse(t, nil, "--workers", "a", "--slots", in, "probe")
		if code != exitcode.OK || cfg.Slots != n {
			t.Errorf("--slots %q: Slots %d (exit %d %s), want %d", in, cfg.Slots, code, out, n)
		}
	}
	for _, sub := range []string{"probe", "hostfile", "discover-hosts"} {
		if _, which, code, out := parse(t, nil, "--workers", "a", sub); code != exitcode.OK || which != sub {
			t.Errorf("%s ran %q (exit %d %s)", sub, which, code, out)
		}
	}
}

// TestFlagsRejected: a bad value never reaches a command.
func TestFlagsRejected(t *testing.T) {
	for _, args := range [][]string{
		{"--slots", "many", "--", "mpirun"},
		{"--slots", "0", "--", "mpirun"},
		{"--probe.parallel", "0", "--", "mpirun"},
		{"--worker.web-port", "70000", "--", "mpirun"},
		{"--discovery.timeout", "-1s", "--", "mpirun"},
		{"--discovery.template", "w-{i}.job", "--", "mpirun"},
		{"mpirun"},
	} {
		_, which, code, out := parse(t, nil, args...)
		if code != exitcode.Usage || which != "" {
			t.Errorf("%q: exit %d, ran %q: %s", args, code, which, out)
		}
		if !strings.Contains(out, "want") && !strings.Contains(out, "give the command") && !strings.Contains(out, "needs --workers-expected") && !strings.Contains(out, "invalid argument") {
			t.Errorf("%q: message %q does not say what is wanted", args, out)
		}
	}
}
