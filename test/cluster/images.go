package cluster

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

//go:embed pause/pause.c
var pauseC []byte

// PauseImage is the pod sandbox image: a static C program FROM scratch,
// built here (nothing is pulled).
const PauseImage = "localhost/podmpi/pause:1.0"

// podman runs podman with the flags this kind of machine needs (hybrid
// cgroups, no systemd session; the same as images/lib.sh).
func podman(ctx context.Context, args ...string) (string, error) {
	return run(ctx, "podman", append([]string{"--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=file"}, args...)...)
}

// ensurePause builds the pause image once (cached as an archive) and
// imports it into containerd.
func (c *Cluster) ensurePause(ctx context.Context) error {
	archive := filepath.Join(c.L.Cache, "images", "pause-1.0.tar")
	if _, err := os.Stat(archive); err != nil {
		dir, err := os.MkdirTemp("", "podmpi-pause-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := os.WriteFile(filepath.Join(dir, "pause.c"), pauseC, 0o644); err != nil {
			return err
		}
		if _, err := run(ctx, "gcc", "-static", "-Os", "-s", "-Wall", "-Werror", "-o", filepath.Join(dir, "pause"), filepath.Join(dir, "pause.c")); err != nil {
			return fmt.Errorf("building the pause program (needs gcc and libc6-dev): %w", err)
		}
		cf := "FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n"
		if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(cf), 0o644); err != nil {
			return err
		}
		if _, err := podman(ctx, "build", "--network=none", "-t", PauseImage, "-f", filepath.Join(dir, "Containerfile"), dir); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
			return err
		}
		if _, err := podman(ctx, "save", "-o", archive+".tmp", PauseImage); err != nil {
			return err
		}
		if err := os.Rename(archive+".tmp", archive); err != nil {
			return err
		}
	}
	if c.hasImage(ctx, PauseImage) {
		return nil
	}
	_, err := c.ctr(ctx, "images", "import", archive)
	return err
}

func (c *Cluster) hasImage(ctx context.Context, ref string) bool {
	out, err := c.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == ref {
			return true
		}
	}
	return false
}

// imported records which podman image ID each reference was imported from.
func (c *Cluster) importedFile() string { return filepath.Join(c.L.State, "images.json") }

func (c *Cluster) readImported() map[string]string {
	m := map[string]string{}
	if b, err := os.ReadFile(c.importedFile()); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return m
}

// ImportImage copies a podman image into the cluster's containerd unless the
// same image (by ID) is already there under that reference.
func (c *Cluster) ImportImage(ctx context.Context, ref string) error {
	id, err := podman(ctx, "image", "inspect", "--format", "{{.Id}}", ref)
	if err != nil {
		return fmt.Errorf("image %s is not in podman's store: %w", ref, err)
	}
	id = strings.TrimSpace(id)
	m := c.readImported()
	if m[ref] == id && c.hasImage(ctx, ref) {
		return nil
	}
	start := time.Now()
	tmp, err := os.CreateTemp("", "podmpi-image-*.tar")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	_ = os.Remove(tmp.Name())
	if _, err := podman(ctx, "save", "-o", tmp.Name(), ref); err != nil {
		return err
	}
	if _, err := c.ctr(ctx, "images", "import", tmp.Name()); err != nil {
		return err
	}
	c.importMu.Lock()
	defer c.importMu.Unlock()
	m = c.readImported()
	m[ref] = id
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileAtomic(c.importedFile(), b, 0o644); err != nil {
		return err
	}
	c.logf("== imported %s into containerd in %s", ref, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// ImageTag is the tag of the podmpi images the cluster runs: the work
// tree's version (scripts/version.sh), as images/build.sh, make image-test
// and make release tag by default.
func (c *Cluster) ImageTag(ctx context.Context) string {
	out, err := run(ctx, filepath.Join(c.L.Repo, "scripts", "version.sh"))
	if err != nil {
		return "v0.0.0-devel"
	}
	return strings.TrimSpace(out)
}

// PodmpiImage is the local (podman) reference of one of the podmpi images,
// as images/build.sh tags it; the cluster pulls them from its registry
// (RegistryImage).
func PodmpiImage(name, tag string) string { return "localhost/podmpi/" + name + ":" + tag }

// imageSource returns the tree the podmpi images are built from and their
// tag: the work tree and its version, or, with
// PODMPI_CLUSTER_IMAGES_FROM=HEAD, the last commit exported into the cache
// (a work tree other edits are changing can be mid-edit) and its version.
func (c *Cluster) imageSource(ctx context.Context) (string, string, error) {
	if os.Getenv("PODMPI_CLUSTER_IMAGES_FROM") != "HEAD" {
		return c.L.Repo, c.ImageTag(ctx), nil
	}
	out, err := run(ctx, "git", "-C", c.L.Repo, "rev-parse", "--short=12", "HEAD")
	if err != nil {
		return "", "", err
	}
	sha := strings.TrimSpace(out)
	dir := filepath.Join(c.L.Src(), "podmpi-"+sha)
	if _, err := os.Stat(filepath.Join(dir, "images", "build.sh")); err != nil {
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", "", err
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "sh", c.L.Repo, dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("exporting HEAD: %w: %s", err, out)
		}
	}
	// HEAD's version: the work tree's without its -dirty.
	return dir, strings.TrimSuffix(c.ImageTag(ctx), "-dirty"), nil
}

// ImageMPIs are the podmpi MPI images the cluster runs (images/<mpi>.Dockerfile).
var ImageMPIs = []string{"openmpi", "mpich", "intelmpi"}

// buildPodmpiImages builds the binaries-only image and the MPI images
// (ImageMPIs) of this machine's platform from src, tagged and stamped tag,
// unless podman has them all under it (a dirty tree is built again: the
// layer cache makes that quick). images/build.sh builds them as make
// image-test and make release do (the podmpi image's build stage with this
// machine's Go caches, seconds when they are warm; the MPI images side by
// side), so that each reuses what the others built.
func (c *Cluster) buildPodmpiImages(ctx context.Context, src, tag string) error {
	arch := runtime.GOARCH
	need := strings.HasSuffix(tag, "-dirty")
	for _, name := range ReleaseImages() {
		if _, err := podman(ctx, "image", "exists", PodmpiImage(name, tag+"-"+arch)); err != nil {
			need = true
		}
	}
	if !need {
		return nil
	}
	start := time.Now()
	logFile := filepath.Join(c.L.Src(), "podmpi-images.log")
	if err := os.MkdirAll(c.L.Src(), 0o755); err != nil {
		return err
	}
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	c.logf("== building the podmpi images: images/build.sh %s (tag %s; log %s)", strings.Join(ReleaseImages(), " "), tag, logFile)
	// The commit's time, also for a tree exported without .git (HEAD).
	created, err := run(ctx, filepath.Join(c.L.Repo, "scripts", "version.sh"), "--created")
	if err != nil {
		return fmt.Errorf("scripts/version.sh --created: %w", err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(src, "images", "build.sh"), ReleaseImages()...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "PODMPI_CREATED="+strings.TrimSpace(created), "PODMPI_VERSION="+tag, "PODMPI_TAG="+tag, "PODMPI_IMAGE_PREFIX=podmpi", "PODMPI_GO_CACHE=host", "PODMPI_PARALLEL=1",
		"PODMPI_PLATFORMS=linux/"+arch, "PODMPI_MPI_PLATFORMS=linux/"+arch, "PODMPI_BUILD_LOGS="+filepath.Join(c.L.Src(), "image-logs"))
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("images/build.sh %s: %w (log %s:\n%s)", strings.Join(ReleaseImages(), " "), err, logFile, tail(logFile, 30))
	}
	c.logf("== podmpi images ready in %s", time.Since(start).Round(time.Second))
	return nil
}
