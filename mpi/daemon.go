package mpi

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/podmpi/podmpi/agent/environ"
)

// IsDaemon reports whether name (a program's file name, without its
// directory) is one of the MPI daemons of the table.
func IsDaemon(name string) bool { return slices.Contains(AllDaemons(), name) }

// CommandDaemon returns the MPI daemon a remote shell command runs, "" when
// it runs none. mpirun's launches through its rsh program look like
//
//	PATH=/opt/ompi/bin:$PATH ; export PATH ; ... ; "/opt/ompi/bin/orted" -mca ess "env" ...
//	/usr/bin/hydra_pmi_proxy --control-port launcher:3000 ...
//
// Only the program of a simple command counts (its first word after the
// start, a ';', '&', '|', '(' or newline, past VAR=value assignments,
// options, and words such as exec, env or then that run what follows), its
// quotes and directory dropped: an argument that merely names a daemon (git
// clone ssh://h/orted, cat orted.log, sh -c orted) does not, nor does a
// lookup (command -v orted, the launcher's probe).
func CommandDaemon(cmd string) string {
	for prog := range programs(cmd) {
		if base := filepath.Base(prog); IsDaemon(base) {
			return base
		}
	}
	return ""
}

// CommandName returns the program a remote shell command runs, for
// messages: the MPI daemon when it runs one, else the program of its first
// simple command as written (quotes dropped), "" for a command that has
// none.
func CommandName(cmd string) string {
	if d := CommandDaemon(cmd); d != "" {
		return d
	}
	for prog := range programs(cmd) {
		return prog
	}
	return ""
}

// programs yields the program word of each simple command in cmd, in order
// (see CommandDaemon), with a shell's quoting: words split at blanks
// outside quotes, commands at ';', '&', '|', '(', ')' and newlines outside
// quotes, quotes removed and a backslash escaping the next character.
func programs(cmd string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		var word strings.Builder
		inWord, start := false, true // start: the next word is in a program's place
		prefix := ""                 // the last of commandPrefixes in the current simple command
		// end finishes the current word; false stops the iteration.
		end := func() bool {
			if !inWord {
				return true
			}
			w := word.String()
			word.Reset()
			inWord = false
			switch {
			case !start:
				return true
			case prefix == "command" && strings.HasPrefix(w, "-") && strings.ContainsAny(w, "vV"):
				start = false // command -v NAME looks NAME up: the builtin is the program
				return yield(prefix)
			case slices.Contains(commandPrefixes, w):
				prefix = w
				return true
			case isAssignment(w) || strings.HasPrefix(w, "-"):
				return true
			}
			start = false
			return yield(w)
		}
		var quote rune
		escaped := false
		for _, r := range cmd {
			switch {
			case escaped:
				word.WriteRune(r)
				escaped, inWord = false, true
			case r == '\\' && quote != '\'':
				escaped, inWord = true, true
			case quote != 0:
				if r == quote {
					quote = 0
				} else {
					word.WriteRune(r)
				}
			case r == '\'' || r == '"':
				quote, inWord = r, true
			case strings.ContainsRune(";&|()\n", r):
				if !end() {
					return
				}
				start, prefix = true, ""
			case r == ' ' || r == '\t' || r == '\r':
				if !end() {
					return
				}
			default:
				word.WriteRune(r)
				inWord = true
			}
		}
		end()
	}
}

// commandPrefixes are the words after which a program's place is still to
// come: commands that run the rest of their line, and the shell's reserved
// words that open a command list.
var commandPrefixes = []string{"exec", "env", "nohup", "command", "time", "!", "{", "}", "if", "then", "else", "elif", "while", "until", "do"}

// isAssignment reports whether w is a shell variable assignment NAME=value.
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	return ok && environ.IsName(name)
}
