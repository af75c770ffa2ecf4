// Package imagetest proves the images of images/ on this machine.
//
// TestBinariesImage checks the binaries-only image of every architecture it
// was built for (only /opt/podmpi, the binaries' architecture and glibc
// needs, the SBOM), runs its binaries copied into a Debian bullseye base, and
// checks that the MPI images carry the same binaries.
//
// TestAllreduceAcrossContainers starts the Open MPI and MPICH images as
// podman containers inside the network-namespace pods of test/harness
// (cluster DNS, Kubernetes pod names),
// one launcher and three workers, each with an arbitrary UID in group 0 and no
// passwd entry, a read-only root with only /tmp writable, no capabilities and
// no-new-privileges, and runs an MPI allreduce across them.
//
// It needs root, podman and the images; "make image-test" (images/test.sh)
// builds them and sets PODMPI_IMAGE_TEST=1. Without that variable the test
// skips, so "go test ./..." stays fast.
package imagetest
