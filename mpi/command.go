package mpi

import (
	"path"
	"strings"
)

// CommandName names the program a remote command line runs, without its
// arguments or environment assignments, for logs, reports and the
// worker's /events: the MPI daemon of the table it runs, by base name,
// when it runs one (Open MPI sends "PATH=...; export PATH; ...
// /opt/ompi/bin/orted -mca ..."); else its first word that is not a
// variable assignment, as written; "" when it has none.
func CommandName(cmd string) string {
	words := strings.Fields(cmd)
	for _, w := range words {
		if base := path.Base(strings.Trim(w, `"';`)); contains(AllDaemons(), base) {
			return base
		}
	}
	for _, w := range words {
		w = strings.Trim(w, `"';`)
		if k, _, ok := strings.Cut(w, "="); ok && k != "" && !strings.ContainsAny(k, "/ ") {
			continue // NAME=value
		}
		if w != "" {
			return w
		}
	}
	return ""
}
