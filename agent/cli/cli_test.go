package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/spf13/pflag"
)

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"ssh.listen-address": "PODMPI_SSH_LISTEN_ADDRESS",
		"slots":              "PODMPI_SLOTS",
		"discovery.timeout":  "PODMPI_DISCOVERY_TIMEOUT",
	} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func newFS() (*pflag.FlagSet, *string, *int, *[]string) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	s := fs.String("ssh.listen-address", ":2222", "listen")
	n := fs.Int("workers-expected", 0, "n")
	l := fs.StringSlice("workers", nil, "list")
	return fs, s, n, l
}

func TestApplyEnvPrecedence(t *testing.T) {
	env := map[string]string{
		"PODMPI_SSH_LISTEN_ADDRESS": ":3333",
		"PODMPI_WORKERS_EXPECTED":   "4",
		"PODMPI_WORKERS":            "a, b,c",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	fs, s, n, l := newFS()
	if err := fs.Parse([]string{"--workers-expected=2"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if *s != ":3333" {
		t.Errorf("env twin not applied: %q", *s)
	}
	if *n != 2 {
		t.Errorf("command line must win over env: got %d", *n)
	}
	if strings.Join(*l, "|") != "a|b|c" {
		t.Errorf("list twin: %q", *l)
	}
}

func TestApplyEnvBadValueNamesVariableNotValue(t *testing.T) {
	fs, _, _, _ := newFS()
	_ = fs.Parse(nil)
	err := ApplyEnv(fs, func(k string) (string, bool) {
		if k == "PODMPI_WORKERS_EXPECTED" {
			return "s3cr3t", true
		}
		return "", false
	})
	if err == nil || !strings.Contains(err.Error(), "PODMPI_WORKERS_EXPECTED") {
		t.Fatalf("want error naming the variable, got %v", err)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error echoes the value: %v", err)
	}
}

func TestAnnotateEnvOnce(t *testing.T) {
	fs, _, _, _ := newFS()
	AnnotateEnv(fs)
	AnnotateEnv(fs)
	u := fs.Lookup("ssh.listen-address").Usage
	if strings.Count(u, "$PODMPI_SSH_LISTEN_ADDRESS") != 1 {
		t.Fatalf("usage = %q", u)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	lg, err := LogFlags{Format: "auto", Level: "info"}.NewLogger(&buf, func(k string) string {
		if k == "KUBERNETES_SERVICE_HOST" {
			return "10.0.0.1"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	lg.Info("hello", "k", 1)
	if !strings.HasPrefix(buf.String(), "{") {
		t.Fatalf("want JSON in a pod, got %q", buf.String())
	}
	if _, err := (LogFlags{Format: "xml", Level: "info"}).NewLogger(&buf, Getenv); err == nil {
		t.Fatal("want error for bad format")
	}
	if _, err := (LogFlags{Format: "text", Level: "loud"}).NewLogger(&buf, Getenv); err == nil {
		t.Fatal("want error for bad level")
	}
}

// TestJSONLogsHaveUniqueKeys: a component's sub-logger adding "component"
// again, and a record repeating a key, give one key each in the JSON line.
func TestJSONLogsHaveUniqueKeys(t *testing.T) {
	var b bytes.Buffer
	lg, err := LogFlags{Format: "json", Level: "debug"}.NewLogger(&b, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	sub := lg.With("component", "launcher", "run", 1).With("component", "slots")
	sub.Info("asking", "host", "a", "host", "b", "run", 2)
	sub.WithGroup("g").Info("grouped", "component", "x")
	for i, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if err := sshtest.UniqueJSONKeys(line); err != nil {
			t.Errorf("line %d %s: %v", i, line, err)
		}
	}
	var rec map[string]any
	first, _, _ := strings.Cut(b.String(), "\n")
	if err := json.Unmarshal([]byte(first), &rec); err != nil || rec["component"] != "slots" || rec["host"] != "b" || rec["run"] != float64(2) {
		t.Errorf("record %v (%v): the last value of a key must win", rec, err)
	}
	if !(LogFlags{Format: "auto"}).JSON(func(k string) string {
		if k == "KUBERNETES_SERVICE_HOST" {
			return "10.96.0.1"
		}
		return ""
	}) || (LogFlags{Format: "auto"}).JSON(func(string) string { return "" }) {
		t.Error("JSON: auto must mean JSON inside Kubernetes only")
	}
}

// TestVerbose: -v gives the debug level whatever --log.level says; a bad
// --log.level is still an error with it.
func TestVerbose(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		flags LogFlags
		debug bool
	}{
		{LogFlags{Format: "text", Level: "warn"}, false},
		{LogFlags{Format: "text", Level: "warn", Verbose: true}, true},
		{LogFlags{Format: "json", Level: "info", Verbose: true}, true},
	} {
		lg, err := tc.flags.NewLogger(io.Discard, getenv)
		if err != nil {
			t.Fatalf("%+v: %v", tc.flags, err)
		}
		if got := lg.Enabled(context.Background(), slog.LevelDebug); got != tc.debug {
			t.Errorf("%+v: debug enabled %t, want %t", tc.flags, got, tc.debug)
		}
	}
	if _, err := (LogFlags{Format: "text", Level: "loud", Verbose: true}).NewLogger(io.Discard, getenv); err == nil {
		t.Error("--log.level loud with -v: no error")
	}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	var l LogFlags
	l.Register(fs)
	if err := fs.Parse([]string{"-v"}); err != nil || !l.Verbose {
		t.Errorf("-v: %v, Verbose %t", err, l.Verbose)
	}
}

// TestExitCodes: the --help block lists every entry of the table it is
// given, a new one too, in lines of at most 80 columns.
func TestExitCodes(t *testing.T) {
	table := append(slices.Clone(exitcode.Table), exitcode.Entry{Code: 79, Name: "a-new-code", Binary: "launcher",
		Meaning: "a code added to the table after this test was written, with a meaning long enough to be wrapped over two lines", Fix: "-"})
	out := ExitCodes(table)
	for _, e := range table {
		head := fmt.Sprintf("  %-4d %s", e.Code, e.Name)
		if e.Binary != "all" {
			head += " (" + e.Binary + ")"
		}
		if !strings.Contains(out, "\n"+head+": ") {
			t.Errorf("no line %q in\n%s", head, out)
		}
	}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if len(l) > helpWidth {
			t.Errorf("line longer than %d columns: %q", helpWidth, l)
		}
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct{ prefix, text, want string }{
		{"  1:", "one two three four", "  1: one two\n   three\n   four\n"},
		{"  1:", "one two six", "  1: one two\n   six\n"},
		{"", "aaaaaaaaaaaaaaa b", "aaaaaaaaaaaaaaa\n   b\n"},
		{"  2:", "", "  2:\n"},
	} {
		if got := Wrap(tc.prefix, tc.text, "   ", 12); got != tc.want {
			t.Errorf("Wrap(%q, %q) = %q, want %q", tc.prefix, tc.text, got, tc.want)
		}
	}
}
