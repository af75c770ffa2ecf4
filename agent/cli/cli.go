// Package cli holds what the launcher and worker-agent command lines share:
// PODMPI_* environment twins for every flag, and the slog logger setup.
//
// Every flag `--a.b-c` has the environment twin `PODMPI_A_B_C`. A flag given
// on the command line wins over its twin; the twin wins over the default.
// The twin's name is appended to the flag's usage so --help shows it.
package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Prefix is the common prefix of every environment twin.
const Prefix = "PODMPI_"

// EnvName returns the environment twin of a flag name:
// "ssh.listen-address" becomes "PODMPI_SSH_LISTEN_ADDRESS".
func EnvName(flag string) string {
	r := strings.NewReplacer(".", "_", "-", "_")
	return Prefix + strings.ToUpper(r.Replace(flag))
}

// AnnotateEnv appends "[$PODMPI_X]" to the usage of every flag in fs, so
// --help lists the twins. Calling it twice does not annotate twice.
func AnnotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		tag := "[$" + EnvName(f.Name) + "]"
		if !strings.Contains(f.Usage, tag) {
			f.Usage = strings.TrimSpace(f.Usage + " " + tag)
		}
	})
}

// ApplyEnv sets every flag of fs that was not given on the command line from
// its environment twin, when the twin is set. lookup is usually os.LookupEnv.
// The error names the variable but never echoes its value, which may hold a
// secret.
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if firstErr != nil || f.Changed || f.Name == "help" {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
			items := splitList(v)
			if err := sv.Replace(items); err != nil {
				firstErr = badEnv(name, f)
			}
			f.Changed = true
			return
		}
		if err := f.Value.Set(v); err != nil {
			firstErr = badEnv(name, f)
			return
		}
		f.Changed = true
	})
	return firstErr
}

// badEnv reports an unparsable twin without its value (the parse error
// would quote it, and it may be a secret).
func badEnv(name string, f *pflag.Flag) error {
	return fmt.Errorf("environment variable %s (twin of --%s) is not a valid %s; unset it or fix its value", name, f.Name, f.Value.Type())
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// LogFlags are the logging flags both binaries carry.
type LogFlags struct {
	Format string // auto, json or text
	Level  string // debug, info, warn or error
	// Verbose is -v: the debug level, whatever Level says. In every podmpi
	// binary -v means verbose, as in kubectl and ssh(1) (podmpi's ssh
	// client counts it as OpenSSH does); the version is --version.
	Verbose bool
}

// Register adds --log.format, --log.level and -v/--verbose to fs.
func (l *LogFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&l.Format, "log.format", "auto", "log format: auto (JSON inside Kubernetes, text otherwise), json or text")
	fs.StringVar(&l.Level, "log.level", "info", "log level: debug, info, warn or error")
	fs.BoolVarP(&l.Verbose, "verbose", "v", false, "verbose: log at the debug level, whatever --log.level says (-v is verbose in every podmpi binary, as in kubectl and ssh; the version is --version)")
}

// NewLogger builds the slog logger for the flags, writing to w.
// getenv decides "auto": JSON when KUBERNETES_SERVICE_HOST is set.
func (l LogFlags) NewLogger(w io.Writer, getenv func(string) string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, fmt.Errorf("--log.level %q: want debug, info, warn or error", l.Level)
	}
	if l.Verbose {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.resolve(getenv) {
	case "json":
		return slog.New(UniqueKeys(slog.NewJSONHandler(w, opts))), nil
	case "text":
		return slog.New(UniqueKeys(slog.NewTextHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("--log.format %q: want auto, json or text", l.Format)
}

// JSON reports whether NewLogger writes JSON with these flags: then nothing
// else may write free text to the same stream (reports become records).
func (l LogFlags) JSON(getenv func(string) string) bool { return l.resolve(getenv) == "json" }

// resolve turns "auto" into json (inside Kubernetes) or text.
func (l LogFlags) resolve(getenv func(string) string) string {
	if l.Format == "auto" || l.Format == "" {
		if getenv("KUBERNETES_SERVICE_HOST") != "" {
			return "json"
		}
		return "text"
	}
	return l.Format
}

// Getenv is os.Getenv, for callers that pass it to NewLogger.
var Getenv = os.Getenv
