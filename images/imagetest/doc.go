// Package imagetest proves the images of images/ on this machine.
//
// TestBinariesImage checks the binaries-only image of every architecture it
// was built for (only /opt/podmpi, the binaries' architecture and glibc
// needs, the SBOM), runs its binaries copied into a Debian bullseye base, and
// checks that the MPI images carry the same binaries.
//
// TestLayout needs no image: it checks that images/layout.sh makes from a
// make build folder the same /opt/podmpi (the binaries, links and SBOM, and
// nothing else), the way the image's build stage and images/build.sh with
// PODMPI_PREBUILT both use it.
//
// TestAllreduceAcrossContainers starts the Open MPI and MPICH images as
// podman containers inside the network-namespace pods of test/harness
// (cluster DNS, Kubernetes pod names),
// one launcher and three workers, each with an arbitrary UID in group 0 and no
// passwd entry, a read-only root with only /tmp writable, no capabilities and
// no-new-privileges, and runs an MPI allreduce across them.
// TestHorovodAcrossContainers does the same with the Horovod image and
// horovodrun as its users type it (no "launcher --").
//
// It needs root, podman and the images; "make image-test" (images/test.sh)
// builds them and sets PODMPI_IMAGE_TEST=1. Without that variable those tests
// skip, so "go test ./..." stays fast.
package imagetest
