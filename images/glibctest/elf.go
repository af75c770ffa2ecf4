package glibctest

import (
	"debug/elf"
	"strings"

	"github.com/podmpi/podmpi/agent/imagecheck"
)

// MaxGLIBC is the newest glibc symbol version worker-agent may ask for: UBI 8
// ships glibc 2.28.
const MaxGLIBC = "2.28"

// Binary is what the ELF reader learns of one executable.
type Binary struct {
	Machine elf.Machine
	Dynamic bool     // has a program interpreter
	GLIBC   []string // the GLIBC_x.y versions it references, without the prefix
}

// Newest is the newest GLIBC version b references, "" when none.
func (b Binary) Newest() string { return imagecheck.Newest(b.GLIBC) }

// ReadBinary reads path's machine, program interpreter and glibc symbol
// version references from its ELF headers.
func ReadBinary(path string) (Binary, error) {
	f, err := elf.Open(path)
	if err != nil {
		return Binary{}, err
	}
	defer f.Close()
	b := Binary{Machine: f.Machine}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b.Dynamic = true
		}
	}
	if !b.Dynamic {
		return b, nil
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		return Binary{}, err
	}
	seen := map[string]bool{}
	for _, s := range syms {
		if v, ok := strings.CutPrefix(s.Version, "GLIBC_"); ok && !seen[v] {
			seen[v] = true
			b.GLIBC = append(b.GLIBC, v)
		}
	}
	return b, nil
}
