// Package cgrouptest writes cgroup file system fixtures for tests.
package cgrouptest

import (
	"os"
	"path/filepath"
	"testing"
)

// Tree writes files (slash-separated path relative to a new temporary
// directory -> content) and returns the directory.
func Tree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
