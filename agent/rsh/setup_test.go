package rsh

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/environ"
)

func TestSetup(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	link, dir, cleanup, err := Setup(self, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(link) != dir || filepath.Base(link) != Name || !strings.HasPrefix(dir, tmp+"/podmpi-") {
		t.Errorf("Setup = %q, %q", link, dir)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, %v", fi.Mode(), err)
	}
	if target, err := os.Readlink(link); err != nil || target != self {
		t.Errorf("symlink -> %q, %v", target, err)
	}
	cleanup()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s: %v", dir, err)
	}

	for _, c := range []struct{ self, tmp, want string }{
		{"relative/launcher", tmp, "not absolute"},
		{"/nonexistent/launcher", tmp, "no such file"},
		{self, filepath.Join(tmp, "with space"), "space"},
		{self, filepath.Join(tmp, "missing"), "creating a private dir"},
	} {
		if c.want == "space" {
			_ = os.Mkdir(c.tmp, 0o755)
		}
		if _, _, _, err := Setup(c.self, c.tmp); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Setup(%q, %q) err = %v, want %q", c.self, c.tmp, err, c.want)
		}
	}
}

func TestOnPath(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Not on PATH: a private dir is linked and put first.
	env, dir, cleanup, err := OnPath([]string{"HOME=/h", "PATH=/usr/bin:/bin"}, self)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if dir == "" || environ.Get(env, "PATH") != dir+":/usr/bin:/bin" || environ.Get(env, "HOME") != "/h" {
		t.Fatalf("OnPath = %q, dir %q", env, dir)
	}
	if target, err := os.Readlink(filepath.Join(dir, Name)); err != nil || target != self {
		t.Errorf("link -> %q, %v", target, err)
	}
	// Already on PATH (the image ships podmpi's bin dir): nothing changes.
	again, dir2, cleanup2, err := OnPath(env, self)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup2()
	if dir2 != "" || environ.Get(again, "PATH") != environ.Get(env, "PATH") {
		t.Errorf("second OnPath added %q: %q", dir2, again)
	}
	// No PATH at all: the default one follows the private dir.
	env, dir, cleanup3, err := OnPath(nil, self)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup3()
	if environ.Get(env, "PATH") != dir+":"+DefaultPath {
		t.Errorf("PATH = %q", environ.Get(env, "PATH"))
	}
}

func TestNamesAndSettings(t *testing.T) {
	for argv0, want := range map[string]bool{
		"podmpi-rsh": true, "/opt/podmpi/bin/ssh": true, "/tmp/podmpi-1/podmpi-rsh": true,
		"launcher": false, "sshd": false, "ssh.real": false, "": false,
	} {
		if IsName(argv0) != want {
			t.Errorf("IsName(%q) = %v", argv0, !want)
		}
	}
	wait := 90 * time.Second
	got := Settings{AuthDir: "/etc/mpi-ssh", Port: 2222, User: "mpiuser", Insecure: true, Wait: &wait}.Env()
	want := [][2]string{{EnvPort, "2222"}, {EnvAuthDir, "/etc/mpi-ssh"}, {EnvUser, "mpiuser"}, {EnvInsecure, "true"}, {EnvWait, "1m30s"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Env() = %v, want %v", got, want)
	}
	if env := (Settings{}).Env(); len(env) != 0 {
		t.Errorf("zero Settings set %v", env)
	}
}

// TestOnPathShadowsOpenSSH: an image whose PATH finds an OpenSSH ssh first
// gets a private dir with every client name in front of it; an image with
// podmpi's bin dir first (ssh and podmpi-rsh linked to the launcher next to
// worker-agent) is left alone.
func TestOnPathShadowsOpenSSH(t *testing.T) {
	usr := t.TempDir()
	if err := os.WriteFile(filepath.Join(usr, "ssh"), []byte("#!/bin/sh\necho openssh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	self := filepath.Join(bin, "worker-agent")
	for _, b := range []string{"worker-agent", "launcher"} {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range Names {
		if err := os.Symlink("launcher", filepath.Join(bin, n)); err != nil {
			t.Fatal(err)
		}
	}
	// podmpi-rsh found (in bin, last), but ssh is OpenSSH's first.
	env, dir, cleanup, err := OnPath([]string{"PATH=" + usr + ":" + bin}, self)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if dir == "" || environ.Get(env, "PATH") != dir+":"+usr+":"+bin {
		t.Fatalf("OnPath = %q, dir %q", env, dir)
	}
	for _, n := range Names {
		if target, err := os.Readlink(filepath.Join(dir, n)); err != nil || target != self {
			t.Errorf("%s -> %q, %v", n, target, err)
		}
	}
	// podmpi's bin dir first: nothing to do.
	env, dir, cleanup2, err := OnPath([]string{"PATH=" + bin + ":" + usr}, self)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup2()
	if dir != "" || environ.Get(env, "PATH") != bin+":"+usr {
		t.Fatalf("podmpi's bin first: OnPath added %q: %q", dir, env)
	}
	// A same-named file in self's directory that is not a podmpi binary
	// does not count.
	other := t.TempDir()
	otherSelf := filepath.Join(other, "worker-agent")
	if err := os.WriteFile(otherSelf, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range Names {
		if err := os.WriteFile(filepath.Join(other, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, dir, cleanup3, err := OnPath([]string{"PATH=" + other}, otherSelf)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup3()
	if dir == "" {
		t.Fatal("ssh and podmpi-rsh files that are not podmpi's were taken for it")
	}
}
