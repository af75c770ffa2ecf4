package rsh

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/launcherid"
)

// TestLauncherInstanceOnTheLauncherPodOnly: the launcher's instance, which
// it passes to mpirun's podmpi-rsh in the environment, is declared by a
// client on the launcher's own pod only; a client on another pod (the
// variable reached a rank there) or with a value it cannot read declares
// nothing and runs its command as before.
func TestLauncherInstanceOnTheLauncherPodOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	here := launcherid.New("uid-1", host, time.Now())
	if env := (Settings{Launcher: here}).Env(); len(env) != 1 || env[0] != [2]string{launcherid.EnvName, here.Value()} {
		t.Fatalf("Settings.Env = %v", env)
	}
	elsewhere := launcherid.New("uid-1", "tj-launcher-0-0-not-"+host, time.Now())
	for _, c := range []struct {
		name, value string
		want        string
	}{
		{"launcher pod", here.Value(), here.ID},
		{"another pod", elsewhere.Value(), ""},
		{"unreadable", "1 zz 5 - -", ""},
		{"unset", "", ""},
	} {
		var errb bytes.Buffer
		r := &runner{env: f.env(launcherid.EnvName, c.value), stderr: &errb}
		cfg, fail := r.config(Options{Host: "127.0.0.1", Verbose: 1}, f.srv.Port)
		if fail != nil {
			t.Fatalf("%s: %v", c.name, fail)
		}
		if cfg.Launcher.ID != c.want {
			t.Errorf("%s: declares %q, want %q (stderr %q)", c.name, cfg.Launcher.ID, c.want, errb.String())
		}
		if res := runMain(t, f.env(launcherid.EnvName, c.value), nil, "-p", f.port(), "127.0.0.1", "echo", "ok"); res.code != 0 || res.stdout != "ok\n" {
			t.Errorf("%s: the command did not run: %+v", c.name, res)
		}
	}
}
