package cluster

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The cluster's OCI registry: the CNCF distribution registry (pinned in
// versions.txt, built from the module proxy) on the host, plain http on the
// bridge address, where make release pushes the podmpi images and the
// node's containerd pulls them from (hosts.toml under RegistryHosts). Its
// storage is kept in the cache between clusters, so that a warm up pushes
// only the layers that changed.
const (
	RegistryPort = 15000
	// RegistryPrefix is the path under the registry the podmpi images
	// go to: REGISTRY=<RegistryAddr>/podmpi in make release's terms.
	RegistryPrefix = "podmpi"
	// registryMaxBytes: up empties the registry's storage when it holds
	// more (every commit's release adds its podmpi layers; a full push of
	// every image costs about a minute).
	registryMaxBytes = 20 << 30
)

// RegistryAddr is where the registry listens and the node pulls from.
func RegistryAddr() string { return net.JoinHostPort(Gateway, strconv.Itoa(RegistryPort)) }

// RegistryStorage is the registry's filesystem storage (in the cache).
func (l Layout) RegistryStorage() string { return filepath.Join(l.Cache, "registry") }

// RegistryHosts is containerd's registry hosts folder (config_path): one
// hosts.toml per registry, in the state folder.
func (l Layout) RegistryHosts() string { return filepath.Join(l.State, "certs.d") }

// Helm is the helm built for the cluster's tests (the pinned version).
func (l Layout) Helm(p Pins) string { return filepath.Join(l.Bin(), "helm-"+p.Helm, "helm") }

const (
	RegistryModule = "github.com/distribution/distribution/v3"
	HelmModule     = "helm.sh/helm/v4"
)

// registryPart is the registry built with only the filesystem storage
// driver (a main package of our own, as cmd/registry's without the other
// drivers and auth backends): the cloud drivers' SDKs are about 40% of its
// cold compile (75 of 186 CPU-seconds measured here).
func registryPart(v string) Part {
	p := Part{Name: "registry", Module: RegistryModule, Version: v, Bins: []string{"registry"},
		LDFlags: "-X " + RegistryModule + "/version.version=" + v, Main: registryMain}
	p.Pkgs = []string{ownMainModule(p)}
	return p
}

// registryMain is the registry's main package: cmd/registry's with only the
// filesystem storage driver.
const registryMain = `// The CNCF distribution registry with only the filesystem storage driver
// (written by podmpi-cluster).
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() { _ = registry.RootCmd.Execute() }
`

func helmPart(v string) Part {
	return modulePart("helm", HelmModule, v, "cmd/helm", "helm",
		"-X "+HelmModule+"/internal/version.version="+v+" -X "+HelmModule+"/internal/version.gitTreeState=clean")
}

// registryConfig is the registry's configuration: filesystem storage,
// deletes allowed (a test may remove what it pushed), no auth, plain http
// on the bridge address only.
func registryConfig(storage string) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
`, storage, RegistryAddr())
}

// registryHostsTOML is containerd's hosts.toml for the registry: plain
// http, pull and resolve.
func registryHostsTOML() string {
	return fmt.Sprintf("# The test cluster's registry (podmpi-cluster): plain http on the bridge.\nserver = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", RegistryAddr())
}

func (c *Cluster) registryProc() *Process {
	bin := filepath.Join(c.B.Dir(registryPart(c.Pins.Registry)), "registry")
	return c.proc("registry", bin, []string{"serve", filepath.Join(c.L.State, "registry.yml")},
		c.httpHealth("http://"+RegistryAddr()+"/v2/", false), 60*time.Second)
}

// startRegistry writes the registry's configuration and containerd's hosts
// file for it, empties its storage when it holds more than
// registryMaxBytes, and starts it (unless it runs).
func (c *Cluster) startRegistry(ctx context.Context) error {
	storage := c.L.RegistryStorage()
	p := c.registryProc()
	if _, ok := p.Running(); !ok {
		if n, err := dirSize(storage); err == nil && n > registryMaxBytes {
			c.logf("== the registry's storage %s holds %s, more than %s: emptied (every image is pushed anew)", storage, gib(uint64(n)), gib(registryMaxBytes))
			if err := os.RemoveAll(storage); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.L.State, "registry.yml"), []byte(registryConfig(storage)), 0o644); err != nil {
		return err
	}
	return p.Start(ctx)
}

// writeRegistryHosts writes containerd's hosts.toml for the registry (read
// at each pull: containerd need not restart).
func (c *Cluster) writeRegistryHosts() error {
	dir := filepath.Join(c.L.RegistryHosts(), RegistryAddr())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(registryHostsTOML()), 0o644)
}

// dirSize is the size of the files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}

// RegistryImage is the reference of a podmpi image in the cluster's
// registry, as make release pushes it and the install manifests name it
// (image.registry <RegistryAddr>/podmpi, image.tag the version).
func RegistryImage(name, tag string) string {
	return RegistryAddr() + "/" + RegistryPrefix + "/" + name + ":" + tag
}

// ReleaseImages are the images make cluster-up releases into the registry:
// the binaries-only image and ImageMPIs.
func ReleaseImages() []string { return append([]string{"podmpi"}, ImageMPIs...) }

// pushImages pushes the podmpi images of tag into the registry, as make
// release's push step does (scripts/release.sh push: one manifest list per
// image, of this machine's platform), and returns their references there.
func (c *Cluster) pushImages(ctx context.Context, tag string) (map[string]string, error) {
	start := time.Now()
	logFile := filepath.Join(c.L.Src(), "podmpi-push.log")
	if err := os.MkdirAll(c.L.Src(), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(c.L.Repo, "scripts", "release.sh"), "push")
	cmd.Dir = c.L.Repo
	cmd.Env = append(os.Environ(), ReleaseEnv(tag, "linux/"+runtime.GOARCH, ReleaseImages())...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("scripts/release.sh push (%s to %s): %w (log %s:\n%s)", strings.Join(ReleaseImages(), " "), RegistryAddr(), err, logFile, tail(logFile, 20))
	}
	refs := map[string]string{}
	for _, name := range ReleaseImages() {
		refs[name] = RegistryImage(name, tag)
	}
	c.logf("== pushed %s of %s to the registry %s in %s (log %s)", strings.Join(ReleaseImages(), ", "), tag, RegistryAddr(), time.Since(start).Round(100*time.Millisecond), logFile)
	return refs, nil
}

// ReleaseCompression is the layers' compression of the cluster's releases:
// zstd compresses about 4 times faster than gzip here (containerd 1.6 pulls
// it); make cluster-test's release passes the same.
const ReleaseCompression = "zstd"

// ReleaseEnv is the environment of scripts/release.sh for a release of
// version to the cluster's registry (plain http), of images for platforms
// (comma-separated): a test cluster runs what the work tree holds, so a
// tree with uncommitted changes is released too.
func ReleaseEnv(version, platforms string, images []string) []string {
	return []string{"VERSION=" + version, "REGISTRY=" + RegistryAddr() + "/" + RegistryPrefix, "TLS_VERIFY=false", "ALLOW_DIRTY=1",
		"PODMPI_RELEASE_PLATFORMS=" + platforms, "PODMPI_RELEASE_IMAGES=" + strings.Join(images, " "), "PODMPI_RELEASE_COMPRESSION=" + ReleaseCompression}
}
