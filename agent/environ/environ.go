// Package environ reads and edits environment lists as execve takes them:
// "NAME=value" entries, where the last entry of a name is the one that
// counts. It is the one such lookup of the launcher, podmpi-rsh and
// worker-agent's SSH server.
package environ

import "strings"

// Lookup returns the value of name in env and whether it is set; the last
// entry of name wins.
func Lookup(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// Get returns the value of name in env, "" when it is not set.
func Get(env []string, name string) string {
	v, _ := Lookup(env, name)
	return v
}

// Set returns env with name set to value: every earlier entry of name is
// dropped and one is appended. env itself is not changed.
func Set(env []string, name, value string) []string {
	return append(Unset(env, name), name+"="+value)
}

// Unset returns env without any entry of name. env itself is not changed.
func Unset(env []string, name string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != name {
			out = append(out, kv)
		}
	}
	return out
}

// IsName reports whether name is a variable name as the shell takes one
// (and so as NAME=value assigns it): letters, digits and '_', not
// starting with a digit.
func IsName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
