package docs

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// noticeRowRe matches a row of NOTICE's module table: a module path, then
// its license.
var noticeRowRe = regexp.MustCompile(`^([a-z0-9.-]+\.[a-z]+/[A-Za-z0-9._/-]+)\s{2,}(\S.*)$`)

// noticeModules returns the module paths NOTICE's table lists.
func noticeModules(notice string) []string {
	var mods []string
	sc := bufio.NewScanner(strings.NewReader(notice))
	for sc.Scan() {
		if m := noticeRowRe.FindStringSubmatch(sc.Text()); m != nil {
			mods = append(mods, m[1])
		}
	}
	return mods
}

// TestNoticeListsLinkedModules keeps NOTICE true: every third-party module
// linked into the three binaries is in its table (and nothing else is), and
// the NOTICE file of every such module that has one is reproduced, as the
// Apache License's section 4(d) asks.
func TestNoticeListsLinkedModules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "NOTICE"))
	if err != nil {
		t.Fatalf("NOTICE: %v", err)
	}
	notice := string(b)
	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err != nil {
		t.Errorf("LICENSE: %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the binaries' modules")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list := exec.CommandContext(ctx, goBin, "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}\t{{.Dir}}{{end}}{{end}}",
		"./cmd/launcher", "./cmd/launcher/podmpi-rsh", "./cmd/worker-agent")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	dirs := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if path, dir, ok := strings.Cut(l, "\t"); ok {
			dirs[path] = dir
		}
	}
	if len(dirs) == 0 {
		t.Fatal("go list found no third-party module: the query no longer works")
	}
	listed := noticeModules(notice)
	for path, dir := range dirs {
		if !slices.Contains(listed, path) {
			t.Errorf("NOTICE: module %s is linked into the binaries but not in the table", path)
		}
		nb, err := os.ReadFile(filepath.Join(dir, "NOTICE"))
		if err != nil {
			continue // no NOTICE file to carry
		}
		if !strings.Contains(notice, strings.TrimSpace(string(nb))) {
			t.Errorf("NOTICE: the NOTICE file of %s (%s) is not reproduced", path, filepath.Join(dir, "NOTICE"))
		}
	}
	for _, path := range listed {
		if _, ok := dirs[path]; !ok {
			t.Errorf("NOTICE: lists %s, which no binary links any more", path)
		}
	}
}

func TestNoticeModulesParser(t *testing.T) {
	got := noticeModules("Module   License\n-----  ----\ngolang.org/x/sys                        BSD-3-Clause\n" +
		"github.com/cespare/xxhash/v2            MIT\nsee https://x.y/z for more\n")
	if !slices.Equal(got, []string{"golang.org/x/sys", "github.com/cespare/xxhash/v2"}) {
		t.Errorf("noticeModules = %q", got)
	}
}
