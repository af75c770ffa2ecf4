package hostfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Format
		wantErr bool
	}{
		{in: "openmpi", want: OpenMPI},
		{in: "OpenMPI", want: OpenMPI}, // Trainer and mpi-operator spelling
		{in: "open-mpi", want: OpenMPI},
		{in: "OMPI", want: OpenMPI},
		{in: " openmpi\n", want: OpenMPI},
		{in: "intelmpi", want: IntelMPI},
		{in: "Intel", want: IntelMPI}, // mpi-operator spelling
		{in: "intel-mpi", want: IntelMPI},
		{in: "impi", want: IntelMPI},
		{in: "mpich", want: MPICH},
		{in: "MPICH", want: MPICH},
		{in: "hydra", want: MPICH},
		{in: "", wantErr: true},
		{in: "mvapich", wantErr: true},
		{in: "open mpi", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFormat(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrUnknownFormat) {
					t.Fatalf("ParseFormat(%q) error = %v, want ErrUnknownFormat", tt.in, err)
				}
				if !strings.Contains(err.Error(), "openmpi, intelmpi, mpich") {
					t.Errorf("error %q does not list the valid names", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseFormat(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatStringRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{OpenMPI, IntelMPI, MPICH} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			got, err := ParseFormat(f.String())
			if err != nil || got != f {
				t.Fatalf("ParseFormat(%q) = %v, %v", f.String(), got, err)
			}
			text, err := f.MarshalText()
			if err != nil {
				t.Fatal(err)
			}
			var u Format
			if err := u.UnmarshalText(text); err != nil || u != f {
				t.Fatalf("UnmarshalText(%q) = %v, %v", text, u, err)
			}
			var s Format
			if err := s.Set(strings.ToLower(f.String())); err != nil || s != f {
				t.Fatalf("Set = %v, %v", s, err)
			}
		})
	}
	if got := Format(9).String(); got != "Format(9)" {
		t.Errorf("Format(9).String() = %q", got)
	}
	if _, err := Format(9).MarshalText(); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("MarshalText of invalid format: %v", err)
	}
	var f Format = MPICH
	if err := f.Set("bogus"); err == nil || f != MPICH {
		t.Errorf("Set(bogus) = %v and changed the value to %v", err, f)
	}
	if f.Type() == "" {
		t.Error("Type() is empty")
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	long63 := strings.Repeat("a", 63)
	tests := []struct {
		name   string
		in     string
		reason string // substring of the error; "" means valid
	}{
		{name: "trainer", in: "tj-node-0-0.tj"},
		{name: "mpi-operator", in: "pi-worker-0.pi.default.svc"},
		{name: "fqdn", in: "pi-worker-0.pi.default.svc.cluster.local"},
		{name: "trailing dot", in: "pi-worker-0.pi.default.svc.cluster.local."},
		{name: "upper case", in: "Node-1.EXAMPLE.org"},
		{name: "single label", in: "localhost"},
		{name: "digit first label", in: "0node.x"},
		{name: "all-digit inner label", in: "node.123.x"},
		{name: "ipv4", in: "10.244.1.7"},
		{name: "ipv4 zero", in: "0.0.0.0"},
		{name: "label 63", in: long63 + ".x"},
		{name: "total 253", in: strings.Repeat(long63+".", 3) + strings.Repeat("b", 61)},

		{name: "empty", in: "", reason: "empty name"},
		{name: "dot", in: ".", reason: `just "."`},
		{name: "leading dot", in: ".a", reason: "starts with '.'"},
		{name: "double dot", in: "a..b", reason: "two dots in a row"},
		{name: "two trailing dots", in: "a..", reason: "two dots in a row"},
		{name: "underscore", in: "tj_node-0.tj", reason: "'_' at offset 2: underscores are not allowed"},
		{name: "leading hyphen", in: "-a.b", reason: `label "-a" starts with '-'`},
		{name: "trailing hyphen", in: "a-.b", reason: `label "a-" ends with '-'`},
		{name: "label 64", in: long63 + "a.x", reason: "64 characters, more than the 63"},
		{name: "total 254", in: strings.Repeat(long63+".", 3) + strings.Repeat("b", 62), reason: "254 characters, more than the 253"},
		{name: "space", in: "a b", reason: `character ' ' at offset 1`},
		{name: "utf8", in: "nöde", reason: `character 'ö' at offset 1`},
		{name: "slash", in: "a/b", reason: `character '/'`},
		{name: "at", in: "user@host", reason: "user@host is not supported"},
		{name: "ipv6", in: "fe80::1", reason: "IPv6 literals are not supported"},
		{name: "ipv6 bracket", in: "[::1]", reason: "IPv6 literals are not supported"},
		{name: "colon", in: "host:2", reason: "':' is not allowed"},
		{name: "bad ipv4 octet", in: "10.0.0.256", reason: "all digits"},
		{name: "ipv4 leading zero", in: "010.0.0.1", reason: "all digits"},
		{name: "ipv4 three parts", in: "10.0.1", reason: "all digits"},
		{name: "numeric single label", in: "123", reason: "all digits"},
		{name: "ipv4 trailing dot", in: "10.0.0.1.", reason: "cannot end with '.'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateName(tt.in)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ValidateName(%q) = %v, want ErrInvalidName", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("ValidateName(%q) = %q, want it to contain %q", tt.in, err, tt.reason)
			}
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		want   []Host
		format Format
	}{
		{
			name:   "trainer",
			in:     "tj-node-0-0.tj slots=2\ntj-node-0-1.tj slots=2\ntj-launcher-0-0.tj slots=2\n",
			want:   []Host{{"tj-node-0-0.tj", 2}, {"tj-node-0-1.tj", 2}, {"tj-launcher-0-0.tj", 2}},
			format: OpenMPI,
		},
		{
			name:   "mpi-operator hydra",
			in:     "pi-worker-0.pi.default.svc:1\npi-worker-1.pi.default.svc:1\n",
			want:   []Host{{"pi-worker-0.pi.default.svc", 1}, {"pi-worker-1.pi.default.svc", 1}},
			format: MPICH,
		},
		{name: "no final newline", in: "a slots=3", want: []Host{{"a", 3}}, format: OpenMPI},
		{name: "bare only", in: "a\nb\n", want: []Host{{"a", 0}, {"b", 0}}, format: OpenMPI},
		{name: "bare with openmpi", in: "a\nb slots=2\n", want: []Host{{"a", 0}, {"b", 2}}, format: OpenMPI},
		{name: "bare with hydra", in: "a\nb:2\n", want: []Host{{"a", 0}, {"b", 2}}, format: MPICH},
		{name: "comments and blanks", in: "# head\n\n   \n\ta slots=1 # tail\n#b slots=9\n", want: []Host{{"a", 1}}, format: OpenMPI},
		{name: "comment glued", in: "a:2#x\n", want: []Host{{"a", 2}}, format: MPICH},
		{name: "crlf", in: "a slots=1\r\nb slots=2\r\n", want: []Host{{"a", 1}, {"b", 2}}, format: OpenMPI},
		{name: "tabs", in: "\ta\tslots=4\t\n", want: []Host{{"a", 4}}, format: OpenMPI},
		{name: "spaces around equals", in: "a slots = 4\nb slots= 5\nc slots =6\n", want: []Host{{"a", 4}, {"b", 5}, {"c", 6}}, format: OpenMPI},
		{name: "count and cpu synonyms", in: "a count=2\nb cpu=3\n", want: []Host{{"a", 2}, {"b", 3}}, format: OpenMPI},
		{name: "max_slots alone", in: "a max_slots=4\n", want: []Host{{"a", 4}}, format: OpenMPI},
		{name: "max-slots with slots", in: "a slots=2 max-slots=8\nb max_slots=3 slots=3\n", want: []Host{{"a", 2}, {"b", 3}}, format: OpenMPI},
		{name: "leading zeros", in: "a slots=007\n", want: []Host{{"a", 7}}, format: OpenMPI},
		{name: "max slots", in: "a:1048576\n", want: []Host{{"a", MaxSlots}}, format: MPICH},
		{name: "ipv4", in: "10.0.0.1 slots=2\n", want: []Host{{"10.0.0.1", 2}}, format: OpenMPI},
		{name: "duplicates sum", in: "a slots=2\nb slots=1\na slots=3\n", want: []Host{{"a", 5}, {"b", 1}}, format: OpenMPI},
		{name: "duplicate bare lines count one each", in: "a\na\na\n", want: []Host{{"a", 3}}, format: OpenMPI},
		{name: "duplicate bare plus counted", in: "a:4\na\n", want: []Host{{"a", 5}}, format: MPICH},
		{name: "duplicate case and dot", in: "Node.x slots=1\nnode.x. slots=1\n", want: []Host{{"Node.x", 2}}, format: OpenMPI},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, f, err := Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) || f != tt.format {
				t.Fatalf("Parse = %v, %v; want %v, %v", got, f, tt.want, tt.format)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		is   error
		line int
		msg  string
	}{
		{name: "empty input", in: "", is: ErrNoHosts, line: 0, msg: "0 lines, none naming a host"},
		{name: "comments only", in: "# a\n\n# b\n", is: ErrNoHosts, line: 0, msg: "3 lines"},
		{name: "slots zero", in: "a slots=1\nb slots=0\n", is: ErrInvalidSlots, line: 2, msg: "slots is 0; it must be at least 1"},
		{name: "hydra zero", in: "a:0\n", is: ErrInvalidSlots, line: 1, msg: "is 0"},
		{name: "negative", in: "a slots=-1\n", is: ErrInvalidSlots, line: 1, msg: "negative"},
		{name: "non numeric", in: "a slots=two\n", is: ErrInvalidSlots, line: 1, msg: `"two" is not a decimal number`},
		{name: "plus sign", in: "a:+2\n", is: ErrInvalidSlots, line: 1, msg: "not a decimal number"},
		{name: "float", in: "a slots=1.5\n", is: ErrInvalidSlots, line: 1, msg: "not a decimal number"},
		{name: "empty value", in: "a slots=\n", is: ErrInvalidSlots, line: 1, msg: "slots has no value"},
		{name: "hydra empty count", in: "a:\n", is: ErrInvalidSlots, line: 1, msg: "has no value"},
		{name: "too many slots", in: "a slots=1048577\n", is: ErrInvalidSlots, line: 1, msg: "more than the maximum 1048576"},
		{name: "overflow", in: "a:99999999999999999999999\n", is: ErrInvalidSlots, line: 1, msg: "more than the maximum"},
		{name: "duplicate overflow", in: "a:1048576\na:1\n", is: ErrInvalidSlots, line: 2, msg: "also listed on line 1"},
		{name: "max below slots", in: "a slots=4 max_slots=2\n", is: ErrInvalidSlots, line: 1, msg: "max_slots=2 is less than slots=4"},
		{name: "slots twice", in: "a slots=1 count=2\n", is: ErrSyntax, line: 1, msg: "given twice (slots= and count=)"},
		{name: "max twice", in: "a max_slots=1 max-slots=2\n", is: ErrSyntax, line: 1, msg: "given twice"},
		{name: "upper-case key", in: "a SLOTS=2\n", is: ErrSyntax, line: 1, msg: `unknown key "SLOTS"`},
		{name: "unknown key", in: "a slotz=2\n", is: ErrSyntax, line: 1, msg: `unknown key "slotz"`},
		{name: "extra word", in: "a b\n", is: ErrSyntax, line: 1, msg: `unexpected "b" after the host name`},
		{name: "missing name", in: "slots=2\n", is: ErrSyntax, line: 1, msg: "host name must come first"},
		{name: "username key", in: "a username=bob\n", is: ErrUnsupported, line: 1, msg: `Open MPI key "username"`},
		{name: "user at host", in: "bob@a slots=1\n", is: ErrUnsupported, line: 1, msg: "user@host"},
		{name: "exclusion", in: "^a\n", is: ErrUnsupported, line: 1, msg: "exclusions"},
		{name: "relative", in: "+n0\n", is: ErrUnsupported, line: 1, msg: "relative node"},
		{name: "hydra option", in: "a:2 ifhn=eth0\n", is: ErrUnsupported, line: 1, msg: "Hydra per-host options"},
		{name: "hydra extra field", in: "a:2:3\n", is: ErrSyntax, line: 1, msg: "more than one ':'"},
		{name: "hydra no name", in: ":2\n", is: ErrSyntax, line: 1, msg: "no host name before ':'"},
		{name: "ipv6", in: "fe80::1 slots=1\n", is: ErrInvalidName, line: 1, msg: "IPv6"},
		{name: "ipv6 hydra", in: "fe80::1:2\n", is: ErrInvalidName, line: 1, msg: "IPv6"},
		{name: "ipv6 bracket hydra", in: "[fe80::1]:2\n", is: ErrInvalidName, line: 1, msg: "IPv6"},
		{name: "underscore", in: "# c\n\nmy_host slots=1\n", is: ErrInvalidName, line: 3, msg: "underscores are not allowed"},
		{name: "hydra bad name", in: "a_b:1\n", is: ErrInvalidName, line: 1, msg: "underscores"},
		{name: "long label", in: strings.Repeat("x", 64) + " slots=1\n", is: ErrInvalidName, line: 1, msg: "more than the 63"},
		{name: "mixed openmpi then hydra", in: "a slots=1\nb\nc:1\n", is: ErrMixedFormat, line: 3, msg: "but line 1 uses the Open MPI form"},
		{name: "mixed hydra then openmpi", in: "a:1\nb max_slots=2\n", is: ErrMixedFormat, line: 2, msg: "but line 1 uses the Intel MPI/MPICH form"},
		{name: "long line", in: "a" + strings.Repeat(" ", maxLineLen) + "\n", is: ErrSyntax, line: 1, msg: "longer than"},
		{name: "nul byte", in: "a\x00b slots=1\n", is: ErrInvalidName, line: 1, msg: `character '\x00'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hosts, _, err := Parse(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error", tt.in, hosts)
			}
			if hosts != nil {
				t.Errorf("hosts = %v on error, want nil", hosts)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("error %q does not wrap %v", err, tt.is)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if pe.Line != tt.line {
				t.Errorf("line = %d, want %d (%v)", pe.Line, tt.line, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

func TestParseErrorFormat(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	tests := []struct {
		e    ParseError
		want string
	}{
		{ParseError{Path: "/etc/mpi/hostfile", Line: 3, Text: "a_b slots=1", Err: cause}, `hostfile /etc/mpi/hostfile:3: "a_b slots=1": boom`},
		{ParseError{Path: "/etc/mpi/hostfile", Err: cause}, `hostfile /etc/mpi/hostfile: boom`},
		{ParseError{Line: 2, Err: cause}, `hostfile line 2: boom`},
		{ParseError{}, `hostfile input: unknown error`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.e.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		f     Format
		hosts []Host
		is    error
		msg   string
	}{
		{name: "empty", f: OpenMPI, hosts: nil, is: ErrNoHosts, msg: "host list is empty"},
		{name: "bad format", f: Format(7), hosts: []Host{{"a", 1}}, is: ErrUnknownFormat, msg: "7"},
		{name: "zero slots", f: OpenMPI, hosts: []Host{{"a", 1}, {"b", 0}}, is: ErrInvalidSlots, msg: `host 1 "b"`},
		{name: "negative slots", f: MPICH, hosts: []Host{{"a", -2}}, is: ErrInvalidSlots, msg: "-2"},
		{name: "too many slots", f: IntelMPI, hosts: []Host{{"a", MaxSlots + 1}}, is: ErrInvalidSlots, msg: "1..1048576"},
		{name: "bad name", f: OpenMPI, hosts: []Host{{"a", 1}, {"b_c", 1}}, is: ErrInvalidName, msg: "host 1"},
		{name: "ipv6", f: MPICH, hosts: []Host{{"::1", 1}}, is: ErrInvalidName, msg: "IPv6"},
		{name: "newline injection", f: OpenMPI, hosts: []Host{{"a\nb", 1}}, is: ErrInvalidName, msg: `'\n'`},
		{name: "duplicate", f: OpenMPI, hosts: []Host{{"a.b", 1}, {"A.B.", 2}}, is: ErrDuplicateHost, msg: `same host as host 0 "a.b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			err := Render(&buf, tt.f, tt.hosts)
			if !errors.Is(err, tt.is) {
				t.Fatalf("Render error = %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
			if buf.Len() != 0 {
				t.Errorf("Render wrote %q despite the error", buf.String())
			}
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, fs.ErrClosed }

func TestRenderWriteError(t *testing.T) {
	t.Parallel()
	err := Render(failWriter{}, MPICH, []Host{{"a", 1}})
	if !errors.Is(err, fs.ErrClosed) || !strings.Contains(err.Error(), "write MPICH hostfile") {
		t.Fatalf("Render to failing writer = %v", err)
	}
}

func TestParseFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	t.Run("ok", func(t *testing.T) {
		t.Parallel()
		p := filepath.Join(dir, "ok")
		if err := os.WriteFile(p, []byte("a:2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		hosts, f, err := ParseFile(p)
		if err != nil || f != MPICH || !reflect.DeepEqual(hosts, []Host{{"a", 2}}) {
			t.Fatalf("ParseFile = %v, %v, %v", hosts, f, err)
		}
	})
	t.Run("error names file and line", func(t *testing.T) {
		t.Parallel()
		p := filepath.Join(dir, "bad")
		if err := os.WriteFile(p, []byte("a slots=1\nb slots=x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := ParseFile(p)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Path != p || pe.Line != 2 || pe.Text != "b slots=x" {
			t.Fatalf("ParseFile error = %#v", err)
		}
		if want := "hostfile " + p + `:2: "b slots=x": invalid slot count: slots "x" is not a decimal number`; err.Error() != want {
			t.Errorf("Error() = %q\nwant      %q", err, want)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		p := filepath.Join(dir, "missing")
		_, _, err := ParseFile(p)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Path != p || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("ParseFile(missing) = %v", err)
		}
		if !strings.Contains(err.Error(), "/etc/mpi/hostfile") {
			t.Errorf("missing-file error lacks the mount hint: %v", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		_, _, err := ParseFile(dir)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Path != dir || !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "directory") {
			t.Fatalf("ParseFile(dir) = %v", err)
		}
	})
	t.Run("symlink to a regular file", func(t *testing.T) {
		t.Parallel()
		// A ConfigMap volume mounts ..data/hostfile behind a symlink.
		target := filepath.Join(dir, "target")
		if err := os.WriteFile(target, []byte("w-0 slots=2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if hosts, _, err := ParseFile(link); err != nil || !reflect.DeepEqual(hosts, []Host{{"w-0", 2}}) {
			t.Fatalf("ParseFile(symlink) = %v, %v", hosts, err)
		}
	})
	// Opening a FIFO with no writer blocks forever; it must be refused
	// instead. A character device is refused too.
	for _, tc := range []struct{ name, path, kind string }{
		{"fifo", "", "FIFO"},
		{"char device", os.DevNull, "character device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.path
			if p == "" {
				p = filepath.Join(dir, "fifo")
				if err := syscall.Mkfifo(p, 0o644); err != nil {
					t.Skipf("mkfifo: %v", err)
				}
			}
			done := make(chan error, 1)
			go func() { _, _, err := ParseFile(p); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("ParseFile(%s) still blocked after 30s", p)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Path != p || !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.kind) {
				t.Fatalf("ParseFile(%s) = %v", p, err)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "hostfile")
	hosts := []Host{{"a.b", 2}, {"c.d", 1}}
	if err := os.WriteFile(p, []byte("old content\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, OpenMPI, hosts, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "a.b slots=2\nc.d slots=1\n"; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", st.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the hostfile (temporary file left behind?)", len(entries))
	}

	if err := WriteFile(p, OpenMPI, []Host{{"bad_name", 1}}, 0o644); !errors.Is(err, ErrInvalidName) {
		t.Errorf("WriteFile(invalid) = %v", err)
	}
	if b2, _ := os.ReadFile(p); !bytes.Equal(b2, b) {
		t.Errorf("invalid WriteFile changed the file to %q", b2)
	}
	err = WriteFile(filepath.Join(dir, "no-such-dir", "hostfile"), MPICH, hosts, 0o644)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no-such-dir") {
		t.Errorf("WriteFile into missing dir = %v", err)
	}
}

func TestTotalSlots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		hosts []Host
		want  int
	}{
		{nil, 0},
		{[]Host{{"a", 2}, {"b", 3}}, 5},
		{[]Host{{"a", 0}, {"b", 3}, {"c", -1}}, 3},
	}
	for _, tt := range tests {
		if got := TotalSlots(tt.hosts); got != tt.want {
			t.Errorf("TotalSlots(%v) = %d, want %d", tt.hosts, got, tt.want)
		}
	}
}

func TestWithDefaultSlots(t *testing.T) {
	t.Parallel()
	in := []Host{{"a", 0}, {"b", 3}}
	got := WithDefaultSlots(in, 4)
	if want := []Host{{"a", 4}, {"b", 3}}; !reflect.DeepEqual(got, want) {
		t.Errorf("WithDefaultSlots = %v, want %v", got, want)
	}
	if in[0].Slots != 0 {
		t.Error("WithDefaultSlots modified its input")
	}
}

func TestHostString(t *testing.T) {
	t.Parallel()
	if got := (Host{"a", 2}).String(); got != "a slots=2" {
		t.Errorf("String = %q", got)
	}
	if got := (Host{"a", 0}).String(); got != "a" {
		t.Errorf("String = %q", got)
	}
}
