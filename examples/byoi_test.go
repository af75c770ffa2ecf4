package examples

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Every pod podmpi installs or shows brings podmpi itself, so that it runs
// any image with an MPI (docs/quickstart.md, "Bring your own image"): the
// volume "podmpi" holds /opt/podmpi of the binaries-only image, filled by the
// init container "podmpi" (an emptyDir) or being that image (an image
// volume); the first container mounts it read-only at /opt/podmpi and has
// /opt/podmpi/bin first on PATH. And since most images have no USER (root),
// the pods run as 1000:0 where the UID is theirs to choose, and leave it to
// the SCC on OpenShift.

const (
	// podmpiVolume is the volume, and the init container, that bring podmpi.
	podmpiVolume = "podmpi"
	// podmpiHome is where the first container mounts it.
	podmpiHome = "/opt/podmpi"
	// podmpiImageName is the binaries-only image's last path element.
	podmpiImageName = "podmpi"
	// podmpiSubPath is where the binaries-only image holds the tree, for an
	// image volume (which mounts the image's root).
	podmpiSubPath = "opt/podmpi"
	// requiredSCC is the annotation that pins a pod to an OpenShift SCC.
	requiredSCC = "openshift.io/required-scc"
	// maxReplicatedJobName is the longest replicated job name Trainer v2.4
	// takes in a runtime.
	maxReplicatedJobName = 20
)

// podmpiPath is what PATH must hold: podmpi first, then the places an
// image's MPI usually is (a container's env replaces the image's PATH).
var podmpiPath = []string{podmpiHome + "/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// isPodmpiProgram reports whether argv0 runs podmpi's program name: found on
// PATH, or by its path in /opt/podmpi/bin.
func isPodmpiProgram(argv0, name string) bool {
	return argv0 == name || argv0 == podmpiHome+"/bin/"+name
}

// Releases whose CRD schemas predate image volumes (volumes[].image): a
// manifest that uses one is not checked against them, and docs/install.md
// says they cannot run it.
var (
	imageVolumeTooOld  = []string{"mpi-operator-v0.5.0"}
	imageVolumeUnknown = regexp.MustCompile(`\.volumes\[\d+\]\.image: unknown field`)
)

// checkBringsPodmpi checks that pod template p brings podmpi into whatever
// image its first container runs.
func checkBringsPodmpi(p podTemplate) []string {
	var errs []string
	at := func(format string, a ...any) { errs = append(errs, p.Path+": "+fmt.Sprintf(format, a...)) }
	ps := p.Spec.Spec
	if len(ps.Containers) == 0 {
		return nil
	}
	var vol *corev1.Volume
	for i := range ps.Volumes {
		if ps.Volumes[i].Name == podmpiVolume {
			vol = &ps.Volumes[i]
		}
	}
	initIdx := slices.IndexFunc(ps.InitContainers, func(c corev1.Container) bool { return c.Name == podmpiVolume })
	imageVolume := false
	switch {
	case vol == nil:
		at("no volume %q: podmpi comes into any image through it (docs/quickstart.md, \"Bring your own image\")", podmpiVolume)
		return errs
	case vol.EmptyDir != nil:
		if initIdx < 0 {
			at("volume %q is an emptyDir, but no init container %q fills it", podmpiVolume, podmpiVolume)
		} else {
			errs = append(errs, initContainerProblems(p.Path, ps.InitContainers[initIdx])...)
		}
	case vol.Image != nil:
		imageVolume = true
		if path.Base(imageName(vol.Image.Reference)) != podmpiImageName {
			at("volume %q: image %q, want the binaries-only image <registry>/%s", podmpiVolume, vol.Image.Reference, podmpiImageName)
		}
		if initIdx >= 0 {
			at("init container %q beside an image volume %q: one or the other", podmpiVolume, podmpiVolume)
		}
	default:
		at("volume %q: want an emptyDir (filled by the init container) or an image volume of the podmpi image", podmpiVolume)
	}

	c := ps.Containers[0]
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name != podmpiVolume {
			continue
		}
		mounted = true
		if m.MountPath != podmpiHome || !m.ReadOnly {
			at("container %q mounts %q at %s (readOnly %t), want %s read-only", c.Name, podmpiVolume, m.MountPath, m.ReadOnly, podmpiHome)
		}
		wantSub := ""
		if imageVolume {
			wantSub = podmpiSubPath // an image volume mounts the image's root
		}
		if m.SubPath != wantSub {
			at("container %q mounts %q with subPath %q, want %q (the podmpi image holds the tree in %s)",
				c.Name, podmpiVolume, m.SubPath, wantSub, podmpiSubPath)
		}
	}
	if !mounted {
		at("container %q does not mount volume %q at %s", c.Name, podmpiVolume, podmpiHome)
	}
	var pathEnv *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "PATH" {
			pathEnv = &c.Env[i]
		}
	}
	if pathEnv == nil || pathEnv.ValueFrom != nil {
		at("container %q sets no PATH: the image's own PATH lacks %s/bin (want %s)", c.Name, podmpiHome, strings.Join(podmpiPath, ":"))
	} else {
		dirs := strings.Split(pathEnv.Value, ":")
		if dirs[0] != podmpiPath[0] {
			at("container %q: PATH %q must start with %s: podmpi's mpirun and ssh come before the image's", c.Name, pathEnv.Value, podmpiPath[0])
		}
		for _, d := range podmpiPath[1:] {
			if !slices.Contains(dirs, d) {
				at("container %q: PATH %q lacks %s, where images keep their MPI and shell", c.Name, pathEnv.Value, d)
			}
		}
	}
	return errs
}

// initContainerProblems checks the init container that copies /opt/podmpi:
// the binaries-only image, "launcher install <dir>" into the folder where it
// mounts the volume, writable.
func initContainerProblems(where string, ic corev1.Container) []string {
	var errs []string
	at := func(format string, a ...any) {
		errs = append(errs, where+": init container "+fmt.Sprintf("%q: ", ic.Name)+fmt.Sprintf(format, a...))
	}
	if path.Base(imageName(ic.Image)) != podmpiImageName {
		at("image %q, want the binaries-only image <registry>/%s (FROM scratch: nothing but /opt/podmpi)", ic.Image, podmpiImageName)
	}
	dir := ""
	for _, m := range ic.VolumeMounts {
		if m.Name == podmpiVolume {
			dir = m.MountPath
			if m.ReadOnly {
				at("mounts %q read-only: it copies into it", podmpiVolume)
			}
		}
	}
	if dir == "" {
		at("does not mount volume %q", podmpiVolume)
	}
	want := []string{podmpiHome + "/bin/launcher", "install", dir}
	if argv := slices.Concat(ic.Command, ic.Args); !slices.Equal(argv, want) {
		at("runs %q, want %q (the image has no shell: the static launcher copies its own tree)", argv, want)
	}
	return errs
}

// checkRunAs checks who the pod runs as: 1000:0 where the manifest chooses
// (an image without USER would run as root, which runAsNonRoot refuses
// before the container starts, and group 0 reads the SSH key Trainer
// mounts), nothing on a pod pinned to an OpenShift SCC, which assigns its
// own UID and refuses one outside the project's range.
func checkRunAs(p podTemplate) []string {
	var errs []string
	at := func(format string, a ...any) { errs = append(errs, p.Path+": "+fmt.Sprintf(format, a...)) }
	psc := p.Spec.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if scc := p.Spec.Annotations[requiredSCC]; scc != "" {
		if psc.RunAsUser != nil || psc.RunAsGroup != nil {
			at("securityContext runAsUser/runAsGroup set on a pod pinned to OpenShift's %s: the SCC assigns the UID from the project's range and refuses another", scc)
		}
		for _, c := range slices.Concat(p.Spec.Spec.InitContainers, p.Spec.Spec.Containers) {
			if sc := c.SecurityContext; sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
				at("container %q sets runAsUser/runAsGroup on a pod pinned to OpenShift's %s", c.Name, scc)
			}
		}
		return errs
	}
	if psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		at("securityContext.runAsUser %s: want a fixed non-root UID (1000): an image without USER runs as root, "+
			"which runAsNonRoot refuses (\"container has runAsNonRoot and image will run as root\")", int64Text(psc.RunAsUser))
	}
	if psc.RunAsGroup == nil || *psc.RunAsGroup != 0 {
		at("securityContext.runAsGroup %s: want 0 (the SSH key Trainer mounts is root-group 0640)", int64Text(psc.RunAsGroup))
	}
	return errs
}

func int64Text(v *int64) string {
	if v == nil {
		return "unset"
	}
	return fmt.Sprint(*v)
}
