package hostfile

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// Limits from RFC 1035 §2.3.4, kept by RFC 1123 §2.1.
const (
	maxNameLen  = 253 // without the optional trailing dot
	maxLabelLen = 63
)

// ValidateName checks that name can be written to a hostfile and resolved:
//
//   - an RFC 1123 host name: dot-separated labels of 1-63 letters, digits and
//     '-', not starting or ending with '-', at most 253 characters; letters
//     of either case (DNS is case-insensitive); one trailing dot (an absolute
//     name that skips the resolver's search list) is allowed;
//   - or an IPv4 literal in dotted-decimal form, e.g. "10.244.1.7".
//
// A name whose last label is all digits must be a valid dotted-quad IPv4
// address: "1.2.3.999", "010.1.1.1" or "123" are rejected because the C
// resolvers MPI uses (inet_aton) would read them as numeric, possibly octal,
// addresses instead of looking them up.
//
// IPv6 literals are rejected: their ':' collides with the Intel MPI/MPICH
// "name:N" syntax and Open MPI's hostfile lexer handles them only partly. Use
// a DNS name; Kubernetes gives every pod one through the headless Service.
func ValidateName(name string) error {
	if err := validateName(name); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidName, shorten(name), err.Error())
	}
	return nil
}

// nameReason is a plain reason string, wrapped by ValidateName.
type nameReason string

func (r nameReason) Error() string { return string(r) }

func reasonf(format string, args ...any) error { return nameReason(fmt.Sprintf(format, args...)) }

func validateName(name string) error {
	if name == "" {
		return reasonf("empty name")
	}
	if strings.Contains(name, ":") {
		if a, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil && a.Is6() {
			return reasonf("IPv6 literals are not supported (':' clashes with the Intel MPI/MPICH name:N form); use the pod's DNS name")
		}
		return reasonf("':' is not allowed in a host name (the Intel MPI/MPICH form is name:N, one count per line)")
	}
	trimmed := strings.TrimSuffix(name, ".")
	if trimmed == "" {
		return reasonf("a name cannot be just \".\"")
	}
	if len(trimmed) > maxNameLen {
		return reasonf("%d characters, more than the %d RFC 1123 allows", len(trimmed), maxNameLen)
	}
	labels := strings.Split(trimmed, ".")
	offset := 0
	for _, l := range labels {
		if err := validateLabel(l, offset); err != nil {
			return err
		}
		offset += len(l) + 1
	}
	last := labels[len(labels)-1]
	if allDigits(last) {
		a, err := netip.ParseAddr(trimmed)
		if err != nil || !a.Is4() {
			return reasonf("the last label %q is all digits, so resolvers would read the name as a numeric address; write a dotted-quad IPv4 address (e.g. 10.0.0.7, no leading zeros) or a DNS name", last)
		}
		if trimmed != name {
			return reasonf("an IPv4 address cannot end with '.'")
		}
	}
	return nil
}

func validateLabel(l string, offset int) error {
	if l == "" {
		if offset == 0 {
			return reasonf("starts with '.' (empty label)")
		}
		return reasonf("empty label at offset %d (two dots in a row)", offset-1)
	}
	if len(l) > maxLabelLen {
		return reasonf("label %q is %d characters, more than the %d RFC 1123 allows", shorten(l), len(l), maxLabelLen)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 {
				return reasonf("label %q starts with '-'", shorten(l))
			}
			if i == len(l)-1 {
				return reasonf("label %q ends with '-'", shorten(l))
			}
		case c == '_':
			return reasonf("'_' at offset %d: underscores are not allowed in RFC 1123 host names (nor in Kubernetes pod or Service names); use '-'", offset+i)
		case c == '@':
			return reasonf("'@' at offset %d: user@host is not supported; the SSH user comes from the pod, not the hostfile", offset+i)
		default:
			r, _ := utf8.DecodeRuneInString(l[i:])
			return reasonf("character %q at offset %d: host names may contain only letters, digits, '-' and '.'", r, offset+i)
		}
	}
	return nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
