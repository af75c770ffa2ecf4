package imagetest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/imagecheck"
)

// minMPICH is the oldest MPICH the MPICH image may carry. MPICH 4.0 (Debian
// bookworm's 4.0.2) closes every UCX endpoint in MPI_Finalize and then waits
// in a blocking PMI barrier. Closing a UCX TCP endpoint that has sent
// anything sends an empty PUT and waits for the peer to acknowledge it; a
// peer already in the barrier makes no UCX progress and never does, so one
// rank spins in MPI_Finalize for ever and mpiexec never returns. That hung
// about one run in three of TestAllreduceAcrossContainers/mpich. MPICH 4.2
// no longer leaves a rank in the barrier while others still close.
const minMPICH = "4.2"

var mpichVersionLine = regexp.MustCompile(`(?m)^MPICH Version:[ \t]+([0-9]+(?:\.[0-9]+)+)\S*[ \t]*$`)

// mpichVersion returns the release that mpichversion's output names, as
// "major.minor[.patch]".
func mpichVersion(out string) (string, error) {
	m := mpichVersionLine.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no \"MPICH Version: <n.n...>\" line in mpichversion's output:\n%s", out)
	}
	return m[1], nil
}

// checkMPICHVersion fails the test when image carries an MPICH older than
// minMPICH.
func checkMPICHVersion(ctx context.Context, t *testing.T, pm podman, image string) {
	t.Helper()
	args := append([]string{"run", "--rm"}, pm.ulimits...)
	args = append(args, image, "mpichversion")
	out, err := pm.run(ctx, args...)
	if err != nil {
		t.Fatalf("mpichversion in %s: %v\n%s", image, err, out)
	}
	v, err := mpichVersion(out)
	if err != nil {
		t.Fatalf("%s: %v", image, err)
	}
	if imagecheck.VersionLess(v, minMPICH) {
		t.Fatalf("%s carries MPICH %s: want %s or later. MPICH 4.0's MPI_Finalize can hang for ever over UCX's "+
			"TCP transport (a rank waits for an acknowledgement from a peer that already waits in the PMI barrier); "+
			"build the image FROM debian:trixie-slim (images/mpich.Dockerfile) or another MPICH 4.2+", image, v, minMPICH)
	}
	t.Logf("%s: MPICH %s", image, v)
}

func TestMPICHVersion(t *testing.T) {
	for _, c := range []struct {
		name, out, want string
		old             bool // older than minMPICH
	}{
		// mpichversion of Debian bookworm's mpich 4.0.2-3 (tab after the colon).
		{"bookworm", "MPICH Version:    \t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\nMPICH Device:    \tch4:ucx\n", "4.0.2", true},
		// mpichversion of Debian trixie's mpich 4.3.0+really4.2.1-1.
		{"trixie", "MPICH Version:      4.2.1\nMPICH Release date: Wed Apr 17 15:30:02 CDT 2024\nMPICH ABI:          16:1:4\nMPICH Device:       ch4:ucx\n", "4.2.1", false},
		{"pre-release", "MPICH Version:      4.3.0b1\n", "4.3.0", false},
		{"4.1", "MPICH Version: 4.1.2\n", "4.1.2", true},
		{"4.10", "MPICH Version: 4.10\n", "4.10", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := mpichVersion(c.out)
			if err != nil {
				t.Fatal(err)
			}
			if v != c.want {
				t.Errorf("version %q, want %q", v, c.want)
			}
			if old := imagecheck.VersionLess(v, minMPICH); old != c.old {
				t.Errorf("VersionLess(%q, %q) = %v, want %v", v, minMPICH, old, c.old)
			}
		})
	}
	for _, bad := range []string{"", "MPICH Version:\n", "MPICH Version: four\n", "HYDRA build details:\n    Version: 4.2.1\n",
		strings.Repeat("x", 100)} {
		if v, err := mpichVersion(bad); err == nil {
			t.Errorf("mpichVersion(%q) = %q, want an error", bad, v)
		}
	}
}
