package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podmpi/podmpi/agent/exitcode"
)

// VersionTemplate is what --version prints: the binary's name and its
// version, the line its `version` subcommand prints (VersionLine).
const VersionTemplate = "{{.Name}} {{.Version}}\n"

// VersionLine is the version line of root's binary, without the newline.
func VersionLine(root *cobra.Command) string { return root.Name() + " " + root.Version }

// helpWidth is the width --help text is wrapped to.
const helpWidth = 80

// ExitCodes is the "Exit codes:" block of a binary's --help: one entry per
// code of table (exitcode.Table), with the binary it belongs to when not
// every binary uses it, and its meaning, wrapped to 80 columns. Taken from
// the table, the list grows with it: a code added there is in every --help.
func ExitCodes(table []exitcode.Entry) string {
	var b strings.Builder
	b.WriteString("Exit codes of the podmpi binaries (docs/troubleshooting.md explains each,\nwith its fix):\n")
	const indent = "       "
	for _, e := range table {
		head := fmt.Sprintf("  %-4d %s", e.Code, e.Name)
		if e.Binary != "all" {
			head += " (" + e.Binary + ")"
		}
		b.WriteString(Wrap(head+":", e.Meaning, indent, helpWidth))
	}
	return b.String()
}

// Wrap writes prefix (kept as it is) and then the words of text, in lines
// of at most width columns broken at spaces (a word longer than that stays
// whole), the lines after the first starting with indent; each line ends
// in a newline.
func Wrap(prefix, text, indent string, width int) string {
	var b strings.Builder
	line := prefix
	for _, w := range strings.Fields(text) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) > width && strings.TrimSpace(line) != "":
			b.WriteString(line + "\n")
			line = indent + w
		default:
			line += " " + w
		}
	}
	if line != "" {
		b.WriteString(line + "\n")
	}
	return b.String()
}
