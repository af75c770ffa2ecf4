package statusfwd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testCA = "-----BEGIN CERTIFICATE-----\nMAo=\n-----END CERTIFICATE-----\n"

func good() Request {
	return Request{Version: Version, Port: 40123, Path: "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status",
		Dir: "/tmp/podmpi-1/trainer-status", Token: strings.Repeat("ab", 32), CA: testCA}
}

func TestParseRequest(t *testing.T) {
	t.Parallel()
	if r, err := ParseRequest(good().Marshal()); err != nil || r != good() {
		t.Fatalf("round trip: %+v, %v", r, err)
	}
	for _, tc := range []struct {
		name    string
		edit    func(*Request)
		wantErr string
	}{
		{"version", func(r *Request) { r.Version = 2 }, "version 2"},
		{"port", func(r *Request) { r.Port = 70000 }, "port 70000"},
		{"relative path", func(r *Request) { r.Path = "apis/x" }, "not a URL path"},
		{"path with a newline", func(r *Request) { r.Path = "/a\r\nHost: evil" }, "not a URL path"},
		{"relative dir", func(r *Request) { r.Dir = "tmp/x" }, "not a clean absolute path"},
		{"unclean dir", func(r *Request) { r.Dir = "/tmp/../etc" }, "not a clean absolute path"},
		{"short token", func(r *Request) { r.Token = "abcd" }, "hex digits"},
		{"token not hex", func(r *Request) { r.Token = strings.Repeat("zz", 16) }, "hex digits"},
		{"no CA", func(r *Request) { r.CA = "" }, "not a PEM certificate"},
		{"key as CA", func(r *Request) { r.CA = strings.ReplaceAll(testCA, "CERTIFICATE", "EC PRIVATE KEY") }, "not a PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.edit(&r)
			if _, err := ParseRequest(r.Marshal()); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, err := ParseRequest([]byte{0, 0, 0}); err == nil || !strings.Contains(err.Error(), "not a "+RequestType) {
		t.Fatalf("garbage: %v", err)
	}
}

func TestReply(t *testing.T) {
	t.Parallel()
	r := Reply{Port: 40123, Dir: "/tmp/x"}
	if got, err := ParseReply(r.Marshal()); err != nil || got != r {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if _, err := ParseReply(Reply{Port: 0, Dir: "/tmp"}.Marshal()); err == nil {
		t.Fatal("a reply without a port was taken")
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	got := strings.Join(Env(40123, "/apis/x/status", "/tmp/d"), " ")
	want := EnvURL + "=https://127.0.0.1:40123/apis/x/status " + EnvToken + "=/tmp/d/token " + EnvCACert + "=/tmp/d/ca.crt"
	if got != want {
		t.Fatalf("Env = %s\nwant  %s", got, want)
	}
}

// FuzzParseRequest: whatever a client sends, the agent gets a checked
// request or an error, never a panic.
func FuzzParseRequest(f *testing.F) {
	f.Add(good().Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		if r.Path[0] != '/' || len(r.Token) < minToken || r.Port > 65535 {
			t.Fatalf("accepted %+v", r)
		}
	})
}

// TestWriteFilesConcurrently: writers that share the directory (the
// launcher and worker-agents on one file system) never fail each other.
func TestWriteFilesConcurrently(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	errs := make(chan error, 16)
	for range 16 {
		go func() { errs <- WriteFiles(dir, strings.Repeat("ab", 16), []byte(testCA)) }()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, TokenFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("%d files left in the directory, want the token and the CA", len(ents))
	}
}
